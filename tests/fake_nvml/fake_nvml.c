/*
 * A fake libnvidia-ml.so.1 for crosscheck's tests: just the NVML calls
 * sensors/_signals/gpu/nvml.py makes, with ABI-compatible signatures, so the real
 * nvidia-ml-py bindings load and drive it.
 *
 * State comes from the file named by $FAKE_NVML_STATE, re-read on every call so a test can
 * change it between reads. One directive a line ('#' starts a comment):
 *
 *   driver 550.54.15
 *   device <uuid> <util|NA> <mem_used_mib> <mem_total_mib> <name, rest of the line>
 *   sample <age_ms> <pct>            utilisation sample of the last device, age_ms before now
 *   proc <pid> <used_mib|NA>         compute process on the last device
 *   fail <function> <code> [index]   that function returns <code> (on device <index> only)
 *
 * Every call is appended to $FAKE_NVML_LOG (if set), so tests can count nvmlInit calls.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define MAX_DEV 16
#define MAX_SAMPLES 256
#define MAX_PROCS 64
#define MAX_FAILS 32

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_TYPE_UNSIGNED_INT 1

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

/* nvmlProcessInfo_v2_t == _v3 layout in the bindings (c_nvmlProcessInfo_v3_t). */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned long long timeStamp;
    nvmlValue_t sampleValue;
} nvmlSample_t;

typedef void *nvmlDevice_t;

struct proc {
    unsigned int pid;
    long long used_mib; /* -1: not available */
};

struct dev {
    char uuid[96];
    char name[96];
    int util; /* -1: not supported */
    unsigned long long used_mib, total_mib;
    int nsamples;
    unsigned long long sample_ts[MAX_SAMPLES];
    unsigned int sample_pct[MAX_SAMPLES];
    int nprocs;
    struct proc procs[MAX_PROCS];
};

struct fail {
    char fn[64];
    int code;
    int index; /* -1: every device */
};

/* Re-read from the state file on every call: per thread, since the real library is
   thread-safe and crosscheck reads GPUs from several threads at once. */
static __thread struct {
    char driver[80];
    int ndev;
    struct dev dev[MAX_DEV];
    int nfails;
    struct fail fails[MAX_FAILS];
} S;

static int initialised;

static unsigned long long now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
}

static void log_call(const char *fn) {
    const char *path = getenv("FAKE_NVML_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", fn);
    fclose(f);
}

static void load(void) {
    memset(&S, 0, sizeof S);
    strcpy(S.driver, "999.99.99");
    const char *path = getenv("FAKE_NVML_STATE");
    if (!path) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    struct dev *d = NULL;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char word[32] = "";
        int off = 0;
        if (sscanf(line, "%31s %n", word, &off) < 1 || word[0] == '#') continue;
        const char *rest = line + off;
        if (!strcmp(word, "driver")) {
            sscanf(rest, "%79s", S.driver);
        } else if (!strcmp(word, "device") && S.ndev < MAX_DEV) {
            d = &S.dev[S.ndev++];
            char util[16];
            int n = 0;
            sscanf(rest, "%95s %15s %llu %llu %n", d->uuid, util, &d->used_mib, &d->total_mib, &n);
            d->util = strcmp(util, "NA") ? atoi(util) : -1;
            snprintf(d->name, sizeof d->name, "%s", n ? rest + n : "Fake GPU");
        } else if (!strcmp(word, "sample") && d && d->nsamples < MAX_SAMPLES) {
            double age_ms = 0;
            unsigned int pct = 0;
            sscanf(rest, "%lf %u", &age_ms, &pct);
            d->sample_ts[d->nsamples] = now_us() - (unsigned long long)(age_ms * 1000.0);
            d->sample_pct[d->nsamples++] = pct;
        } else if (!strcmp(word, "proc") && d && d->nprocs < MAX_PROCS) {
            char used[32];
            struct proc *p = &d->procs[d->nprocs++];
            sscanf(rest, "%u %31s", &p->pid, used);
            p->used_mib = strcmp(used, "NA") ? atoll(used) : -1;
        } else if (!strcmp(word, "fail") && S.nfails < MAX_FAILS) {
            struct fail *x = &S.fails[S.nfails];
            x->index = -1;
            if (sscanf(rest, "%63s %d %d", x->fn, &x->code, &x->index) >= 2) S.nfails++;
        }
    }
    fclose(f);
}

/* Common prologue: log, reload state, honour a configured failure. */
static int enter(const char *fn, int index) {
    log_call(fn);
    load();
    for (int i = 0; i < S.nfails; i++)
        if (!strcmp(S.fails[i].fn, fn) && (S.fails[i].index < 0 || S.fails[i].index == index))
            return S.fails[i].code;
    return NVML_SUCCESS;
}

static int dev_index(nvmlDevice_t h) { return (int)((uintptr_t)h - 0x1000); }

static struct dev *get_dev(nvmlDevice_t h) {
    int i = dev_index(h);
    return (i >= 0 && i < S.ndev) ? &S.dev[i] : NULL;
}

#define ENTER(fn, index)                            \
    do {                                            \
        int rc_ = enter(fn, index);                 \
        if (rc_) return rc_;                        \
        if (!initialised) return NVML_ERROR_UNINITIALIZED; \
    } while (0)

int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    int rc = enter("nvmlInitWithFlags", -1);
    if (!rc) initialised = 1;
    return rc;
}

int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

int nvmlShutdown(void) {
    ENTER("nvmlShutdown", -1);
    initialised = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(int result) {
    static __thread char buf[64];
    snprintf(buf, sizeof buf, "fake NVML error %d", result);
    return buf;
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER("nvmlSystemGetDriverVersion", -1);
    snprintf(version, length, "%s", S.driver);
    return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER("nvmlDeviceGetCount_v2", -1);
    *count = (unsigned int)S.ndev;
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER("nvmlDeviceGetHandleByIndex_v2", (int)index);
    if ((int)index >= S.ndev) return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)(uintptr_t)(0x1000 + index);
    return NVML_SUCCESS;
}

int nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int length) {
    ENTER("nvmlDeviceGetUUID", dev_index(h));
    struct dev *d = get_dev(h);
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(uuid, length, "%s", d->uuid);
    return NVML_SUCCESS;
}

int nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int length) {
    ENTER("nvmlDeviceGetName", dev_index(h));
    struct dev *d = get_dev(h);
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(name, length, "%s", d->name);
    return NVML_SUCCESS;
}

int nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u) {
    ENTER("nvmlDeviceGetUtilizationRates", dev_index(h));
    struct dev *d = get_dev(h);
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->util < 0) return NVML_ERROR_NOT_SUPPORTED;
    u->gpu = (unsigned int)d->util;
    u->memory = 0;
    return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
    ENTER("nvmlDeviceGetMemoryInfo", dev_index(h));
    struct dev *d = get_dev(h);
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = d->total_mib << 20;
    m->used = d->used_mib << 20;
    m->free = m->total > m->used ? m->total - m->used : 0;
    return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *count,
                                            nvmlProcessInfo_t *infos) {
    ENTER("nvmlDeviceGetComputeRunningProcesses_v3", dev_index(h));
    struct dev *d = get_dev(h);
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = (unsigned int)d->nprocs;
    if (*count < n || (!infos && n)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    for (unsigned int i = 0; i < n; i++) {
        infos[i].pid = d->procs[i].pid;
        infos[i].usedGpuMemory = d->procs[i].used_mib < 0
                                     ? 0xFFFFFFFFFFFFFFFFULL
                                     : (unsigned long long)d->procs[i].used_mib << 20;
        infos[i].gpuInstanceId = 0xFFFFFFFFu;
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    return NVML_SUCCESS;
}

int nvmlDeviceGetSamples(nvmlDevice_t h, int type, unsigned long long lastSeen, int *valType,
                         unsigned int *count, nvmlSample_t *samples) {
    ENTER("nvmlDeviceGetSamples", dev_index(h));
    struct dev *d = get_dev(h);
    if (!d || type != 1 /* NVML_GPU_UTILIZATION_SAMPLES */) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int i = 0; i < d->nsamples; i++)
        if (d->sample_ts[i] > lastSeen) n++;
    /* Like the driver: no sample newer than lastSeen is NOT_FOUND. */
    if (!n) return NVML_ERROR_NOT_FOUND;
    if (!samples) {
        *count = n;
        return NVML_SUCCESS;
    }
    unsigned int k = 0;
    for (int i = 0; i < d->nsamples && k < *count; i++) {
        if (d->sample_ts[i] <= lastSeen) continue;
        samples[k].timeStamp = d->sample_ts[i];
        samples[k].sampleValue.ullVal = 0;
        samples[k].sampleValue.uiVal = d->sample_pct[i];
        k++;
    }
    *count = k;
    *valType = NVML_VALUE_TYPE_UNSIGNED_INT;
    return NVML_SUCCESS;
}
