// How fast can any reader copy an uncompressed window out of the page cache on this machine?
// A throwaway-sized probe behind the uncompressed analysis in docs/benchmarks.md: it reads
// 6-step windows of the 81-channel store that `peer_bench.py make` writes (60 steps; thetao, so,
// uo, vo × 19 levels + zos, tauuo, tauvo, hfds, hfds_anomalies; one raw (1,1,180,360) chunk per
// plane, compressor None) on 2 threads into one reused buffer, 40 windows, and prints the best
// and mean GB/s of each way of getting the bytes there:
//   0  open + pread + close per plane (what om4 does for a raw chunk)
//   1  open + mmap(MAP_POPULATE) + memcpy + munmap per plane
//   2  open + mmap + memcpy + munmap per plane (pages faulted in by the copy)
//   3  every chunk file mapped once up front, then memcpy only (needs one mapping per plane)
//   4  every chunk file opened once up front, then pread only
//
//   gcc -O2 -o /tmp/pagecache_probe benches/peers/pagecache_probe.c -lpthread
//   /tmp/pagecache_probe MODE /path/to/om4_v2_none.zarr
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PLANE (180 * 360 * 4)
#define STEPS 60
#define CHANNELS 81
#define WINDOW 6
#define THREADS 2

static char paths[STEPS * CHANNELS][512];
static void *maps[STEPS * CHANNELS];
static int fds[STEPS * CHANNELS];
static char *out;
static int mode, start;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int copy_plane(int i) {
    int idx = (start + i / CHANNELS) * CHANNELS + i % CHANNELS;
    char *dst = out + (size_t)i * PLANE;
    if (mode == 3) { memcpy(dst, maps[idx], PLANE); return 0; }
    if (mode == 4) return pread(fds[idx], dst, PLANE, 0) == PLANE ? 0 : -1;
    int fd = open(paths[idx], O_RDONLY);
    if (fd < 0) return -1;
    if (mode == 0) {
        ssize_t n = pread(fd, dst, PLANE, 0);
        close(fd);
        return n == PLANE ? 0 : -1;
    }
    void *m = mmap(0, PLANE, PROT_READ, MAP_PRIVATE | (mode == 1 ? MAP_POPULATE : 0), fd, 0);
    close(fd);
    if (m == MAP_FAILED) return -1;
    memcpy(dst, m, PLANE);
    munmap(m, PLANE);
    return 0;
}

static void *work(void *arg) {
    long t = (long)arg;
    for (int i = t * WINDOW * CHANNELS / THREADS; i < (t + 1) * WINDOW * CHANNELS / THREADS; i++)
        if (copy_plane(i)) { perror("plane"); exit(1); }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s MODE STORE\n", argv[0]); return 2; }
    mode = atoi(argv[1]);
    const char *depth[] = {"thetao", "so", "uo", "vo"};
    const char *surface[] = {"zos", "tauuo", "tauvo", "hfds", "hfds_anomalies"};
    for (int t = 0, k = 0; t < STEPS; t++) {
        for (int v = 0; v < 4; v++)
            for (int l = 0; l < 19; l++) snprintf(paths[k++], 512, "%s/%s/%d.%d.0.0", argv[2], depth[v], t, l);
        for (int j = 0; j < 5; j++) snprintf(paths[k++], 512, "%s/%s/%d.0.0", argv[2], surface[j], t);
    }
    if (mode >= 3)
        for (int i = 0; i < STEPS * CHANNELS; i++) {
            if ((fds[i] = open(paths[i], O_RDONLY)) < 0) { perror(paths[i]); return 1; }
            if (mode == 3 && (maps[i] = mmap(0, PLANE, PROT_READ, MAP_SHARED | MAP_POPULATE, fds[i], 0)) == MAP_FAILED) {
                perror("mmap");
                return 1;
            }
        }
    size_t bytes = (size_t)WINDOW * CHANNELS * PLANE;
    out = aligned_alloc(4096, bytes);
    memset(out, 1, bytes);
    double best = 1e9, total = 0;
    int rounds = 40;
    for (int r = 0; r < rounds; r++) {
        start = (r * 7) % (STEPS - WINDOW);
        double t0 = now();
        pthread_t th[THREADS];
        for (long t = 0; t < THREADS; t++) pthread_create(&th[t], 0, work, (void *)t);
        for (int t = 0; t < THREADS; t++) pthread_join(th[t], 0);
        double d = now() - t0;
        best = d < best ? d : best;
        total += d;
    }
    printf("mode %d: best %.2f GB/s, mean %.2f GB/s\n", mode, bytes / best / 1e9, bytes * rounds / total / 1e9);
    return 0;
}
