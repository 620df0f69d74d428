/* faults.c - the runtime under faults; one scenario per argument:
 *   exit-in-region   exit(3) while "outer/doomed" are open: X records
 *   unjoined N       N threads open "spin" and loop; main returns without joining them
 *   many T K         T threads each do K begin/end pairs of "hot" (by handle) and
 *                    "named" (by name), all joined: no event may be lost
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "powerperf.h"

static volatile int started;
static pp_handle_t hot;
static long pairs;

static void *spinner(void *arg) {
    (void)arg;
    pp_region_begin("unjoined");
    pp_region_begin("finished-part");
    pp_region_end("finished-part");
    pp_region_begin("spin");
    __atomic_add_fetch(&started, 1, __ATOMIC_SEQ_CST);
    for (;;) pause();
    return NULL;
}

static void *hammer(void *arg) {
    (void)arg;
    for (long i = 0; i < pairs; i++) {
        pp_region_begin_h(hot);
        pp_region_begin("named");
        pp_region_end("named");
        pp_region_end_h(hot);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "exit-in-region") == 0) {
        pp_region_begin("outer");
        pp_region_begin("doomed");
        exit(3);
    }
    if (argc >= 3 && strcmp(argv[1], "unjoined") == 0) {
        int n = atoi(argv[2]);
        pthread_t t;
        for (int i = 0; i < n; i++) pthread_create(&t, NULL, spinner, NULL);
        while (__atomic_load_n(&started, __ATOMIC_SEQ_CST) < n) usleep(1000);
        return 0;
    }
    if (argc >= 4 && strcmp(argv[1], "many") == 0) {
        int n = atoi(argv[2]);
        pairs = atol(argv[3]);
        hot = pp_region_handle("hot");
        pthread_t *t = calloc((size_t)n, sizeof *t);
        for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, hammer, NULL);
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        free(t);
        return 0;
    }
    fprintf(stderr, "usage: faults exit-in-region | unjoined N | many THREADS PAIRS\n");
    return 2;
}
