/* nvtx_client.c - a minimal stand-in for the NVTX v3 loader, without the NVIDIA headers.
 *
 * Does what nvtxInitOnce does (nvtx3/nvtxDetail/nvtxInit.h): dlopen $NVTX_INJECTION64_PATH,
 * call its InitializeInjectionNvtx2 with an export table function, then call the slots the
 * tool filled in the CORE and CORE2 tables (ids and layouts: nvtx3/nvtxDetail/nvtxTypes.h,
 * nvtx3/nvToolsExt.h). Exercises the paths the Python package does not: RangePushA/W,
 * RangePushEx with a Unicode message, RangeStartA/End on the same and on another thread.
 * Prints "init=<rc>".
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

typedef void (*fnptr)(void);

typedef struct {
    uint16_t version, size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type, reserved0;
    uint64_t payload;
    int32_t message_type;
    const void *message;
} attrs_t; /* nvtxEventAttributes_v2 */

static int (*push_a)(const char *);
static int (*push_w)(const wchar_t *);
static int (*push_ex)(const attrs_t *);
static int (*pop)(void);
static uint64_t (*start_a)(const char *);
static void (*end)(uint64_t);
static void *(*domain_create_a)(const char *);
static void *(*register_a)(void *, const char *);
static int (*domain_push_ex)(void *, const attrs_t *);
static int (*domain_pop)(void *);

static fnptr *core[16 + 1] = {0};
static fnptr *core2[16 + 1] = {0};

static int get_table(int module, fnptr ***out, unsigned *size) {
    if (module == 1) { *out = core; *size = 16; return 1; }
    if (module == 5) { *out = core2; *size = 16; return 1; }
    return 0;
}

static struct { size_t size; int (*get)(int, fnptr ***, unsigned *); } callbacks = {
    sizeof(callbacks), get_table};

static const void *get_export_table(uint32_t id) { return id == 1 ? &callbacks : NULL; }

static void *other_thread_end(void *arg) {
    end(*(uint64_t *)arg);
    return NULL;
}

int main(void) {
    core[9] = (fnptr *)&push_a;
    core[10] = (fnptr *)&push_w;
    core[8] = (fnptr *)&push_ex;
    core[11] = (fnptr *)&pop;
    core[5] = (fnptr *)&start_a;
    core[7] = (fnptr *)&end;
    core2[12] = (fnptr *)&domain_create_a;
    core2[10] = (fnptr *)&register_a;
    core2[4] = (fnptr *)&domain_push_ex;
    core2[5] = (fnptr *)&domain_pop;

    const char *path = getenv("NVTX_INJECTION64_PATH");
    void *lib = path ? dlopen(path, RTLD_LAZY) : NULL;
    if (!lib) { fprintf(stderr, "cannot load %s\n", path ? path : "(unset)"); return 2; }
    int (*init)(const void *(*)(uint32_t)) =
        (int (*)(const void *(*)(uint32_t)))dlsym(lib, "InitializeInjectionNvtx2");
    if (!init) return 3;
    int rc = init(get_export_table);
    printf("init=%d\n", rc);
    if (!rc) return 0; /* NVTX would make every call a no-op */

    attrs_t uni = {3, sizeof(attrs_t), 0, 0, 0, 0, 0, 0, 2, L"r\u00e9sum\u00e9"};
    attrs_t none = {3, sizeof(attrs_t), 0, 0, 0, 0, 0, 0, 0, NULL};
    void *dom = domain_create_a("lib");
    attrs_t reg = {3, sizeof(attrs_t), 0, 0, 0, 0, 0, 0, 3, register_a(dom, "registered")};

    int lvl = push_a("outer");                  /* 0 */
    lvl += push_w(L"wide");                     /* 1 */
    lvl += push_ex(&uni);                       /* 2 */
    pop();
    pop();
    push_ex(&none);
    pop();
    domain_push_ex(dom, &reg);
    uint64_t same = start_a("started");
    end(same);
    domain_pop(dom);
    uint64_t moved = start_a("moved");          /* ends on another thread: not recorded */
    pthread_t t;
    pthread_create(&t, NULL, other_thread_end, &moved);
    pthread_join(t, NULL);
    pop();                                      /* outer: closes "moved", which is abandoned */
    printf("levels=%d extra_pop=%d\n", lvl, pop());
    return 0;
}
