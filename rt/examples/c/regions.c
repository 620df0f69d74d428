/* regions.c - marks nested regions from C, by name and by handle, on several threads.
 *
 *   gcc -O2 -pthread -I rt/include rt/examples/c/regions.c -L DIR -lpowerperf_rt \
 *       -Wl,-rpath,DIR -o regions
 *   POWERPERF_RUN_DIR=/tmp/run ./regions
 *
 * Records per thread: main (1 call) > solve (1) > step (10) > compute (10, by handle),
 * and on 2 worker threads: worker (1) > chunk (5).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "powerperf.h"

static volatile double sink;

static void work(int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)i * 0.5;
    sink = s;
}

static void *worker(void *arg) {
    (void)arg;
    pp_region_begin("worker");
    for (int i = 0; i < 5; i++) {
        pp_region_begin("chunk");
        work(100000);
        pp_region_end("chunk");
    }
    pp_region_end("worker");
    return NULL;
}

int main(void) {
    int rc = 0;
    pp_handle_t compute = pp_region_handle("compute");
    if (compute < 0) {
        fprintf(stderr, "pp_region_handle failed: %d\n", compute);
        return 1;
    }
    rc |= pp_region_begin("main");
    rc |= pp_region_begin("solve");
    for (int i = 0; i < 10; i++) {
        rc |= pp_region_begin("step");
        rc |= pp_region_begin_h(compute);
        work(200000);
        rc |= pp_region_end_h(compute);
        rc |= pp_region_end("step");
    }
    rc |= pp_region_end("solve");

    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);

    /* Misuse is reported, not fatal. */
    int bad = pp_region_end("never-begun");
    rc |= pp_region_end("main");
    printf("recording=%d misuse_rc=%d rc=%d\n", pp_enabled(), bad, rc);
    return rc != 0;
}
