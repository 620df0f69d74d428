/*
 * powerperf.h - region markers for programs measured by powerperf (powerperf-rt).
 *
 * Link with -lpowerperf_rt (libpowerperf_rt.so, next to the powerperf binary).
 *
 * With POWERPERF_RUN_DIR set (powerperf collect / apply set it), every begin and end is
 * recorded with its CLOCK_MONOTONIC time (ns) and OS thread id into
 * $POWERPERF_RUN_DIR/region_events/<pid>.tsv. Without it every call is a no-op that
 * returns 0. Regions nest per thread; every function is thread-safe.
 *
 * Return values: 0 on success, or a negative errno:
 *   PP_ENOTOPEN (-ENOENT)  end of a region not open on this thread; the end is recorded
 *   PP_ENEST    (-EILSEQ)  end of a region that is open but not the innermost one; the end
 *                          is recorded and the regions opened inside it are abandoned
 *   PP_EINVAL   (-EINVAL)  NULL name, or a handle pp_region_handle did not return
 *   PP_ENOSPC   (-ENOSPC)  the region name table is full
 * Misuse is never fatal.
 */
#ifndef POWERPERF_H
#define POWERPERF_H

#include <errno.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PP_OK 0
#define PP_ENOTOPEN (-ENOENT)
#define PP_ENEST (-EILSEQ)
#define PP_EINVAL (-EINVAL)
#define PP_ENOSPC (-ENOSPC)

/* A region resolved once: > 0 a region id, 0 when recording is off (a valid handle that
 * does nothing), < 0 an error code. Valid in every thread for the life of the process. */
typedef int32_t pp_handle_t;

/* Begin / end region `name` (NUL-terminated) on the calling thread. */
int pp_region_begin(const char *name);
int pp_region_end(const char *name);

/* The handle of region `name`; begin/end by handle skip the name lookup. */
pp_handle_t pp_region_handle(const char *name);
int pp_region_begin_h(pp_handle_t h);
int pp_region_end_h(pp_handle_t h);

/* Write every thread's buffered events to the events file now. Buffers are also written
 * when full (8192 events), at thread exit and at process exit (exit() / return from main),
 * including threads never joined; regions still open then get an X record. */
void pp_flush(void);

/* 1 when regions are recorded, else 0. */
int pp_enabled(void);

#ifdef __cplusplus
}
#endif

#endif /* POWERPERF_H */
