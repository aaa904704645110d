/* mp_tboard.h - TensorBoard event files, written natively (--tensorboard).
 *
 * What it owns: one new file DIR/events.out.tfevents.<unix time>.<host> (DIR
 * created if missing; never an existing file: a second run in the same
 * second adds .1, .2, ...), opened once, appended to and flushed after each
 * logged step, like the JSONL log (TensorBoard reads it while it grows).
 *
 * Format: TFRecord framing, each record
 *     u64 length, u32 masked_crc32c(length bytes), data, u32 masked_crc32c(data)
 * (little-endian; CRC-32C, Castagnoli, reflected polynomial 0x82F63B78;
 * masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8), and data a
 * tensorflow.Event protocol buffer, hand-encoded:
 *     Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *               Summary summary = 5; }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; float simple_value = 2; }
 * The first record is the file_version event ("brain.Event:2"); then one
 * event per call of mp_tb_scalars, holding all its scalars at one step.
 * Errors: a failed write is reported once, by mp_tb_flush's return. */
#ifndef MP_TBOARD_H
#define MP_TBOARD_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "mp_util.h"

typedef struct MpTb {
    FILE *f;
    char *path;
    MpBuf ev;                   /* the event being built */
} MpTb;

static inline uint32_t mp_crc32c(const unsigned char *p, size_t n)
{
    static uint32_t table[256];
    static int ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static inline uint32_t mp_tb_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static inline void mp_tb_le(unsigned char *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static inline void mp_pb_varint(MpBuf *b, uint64_t v)
{
    unsigned char c[10];
    int n = 0;
    do {
        c[n++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    mp_buf_add(b, c, (size_t)n);
}

static inline void mp_pb_bytes(MpBuf *b, int field, const void *p, size_t n)
{
    mp_pb_varint(b, (uint64_t)field << 3 | 2);
    mp_pb_varint(b, n);
    mp_buf_add(b, p, n);
}

/* One TFRecord holding the event in t->ev. */
static inline void mp_tb_record(MpTb *t)
{
    unsigned char len[8], crc[4];
    mp_tb_le(len, t->ev.len, 8);
    fwrite(len, 1, 8, t->f);
    mp_tb_le(crc, mp_tb_mask(mp_crc32c(len, 8)), 4);
    fwrite(crc, 1, 4, t->f);
    fwrite(t->ev.p, 1, t->ev.len, t->f);
    mp_tb_le(crc, mp_tb_mask(mp_crc32c((const unsigned char *)t->ev.p, t->ev.len)), 4);
    fwrite(crc, 1, 4, t->f);
}

/* Starts an Event: wall_time and step. */
static inline void mp_tb_event(MpTb *t, double wall, int64_t step)
{
    unsigned char d[9] = {1 << 3 | 1};
    uint64_t bits;
    memcpy(&bits, &wall, 8);
    mp_tb_le(d + 1, bits, 8);
    t->ev.len = 0;
    mp_buf_add(&t->ev, d, 9);
    mp_pb_varint(&t->ev, 2 << 3 | 0);
    mp_pb_varint(&t->ev, (uint64_t)step);
}

/* mkdir -p dir (0777 less the umask). */
static inline int mp_mkdirs(const char *dir, MpErr *e)
{
    size_t n = strlen(dir);
    char *p = (char *)malloc(n + 1);
    if (!p)
        return mp_errf(e, "out of memory");
    memcpy(p, dir, n + 1);
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c && c != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0777) && errno != EEXIST) {
            mp_errf(e, "%s: cannot create the folder (%s)", p, strerror(errno));
            free(p);
            return 1;
        }
        if (!(*s = c))
            break;
    }
    free(p);
    return 0;
}

/* Creates DIR (if missing) and the event file; writes the version event. */
static inline int mp_tb_open(MpTb *t, const char *dir, MpErr *e)
{
    char host[256] = "localhost";
    memset(t, 0, sizeof t[0]);
    if (mp_mkdirs(dir, e))
        return 1;
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    size_t cap = strlen(dir) + strlen(host) + 64;
    long long now = (long long)time(NULL);
    int fd = -1;
    if (!(t->path = (char *)malloc(cap)))
        return mp_errf(e, "out of memory");
    /* a new file; another run's of the same second gets a suffix: .1, .2 */
    for (int k = 0; fd < 0 && k < 100; k++) {
        int len = snprintf(t->path, cap, "%s/events.out.tfevents.%lld.%s", dir, now, host);
        if (k)
            snprintf(t->path + len, cap - (size_t)len, ".%d", k);
        fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0 || !(t->f = fdopen(fd, "wb"))) {
        mp_errf(e, "%s: cannot open for writing (%s)", t->path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 1;
    }
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    mp_tb_event(t, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, 0);
    mp_pb_bytes(&t->ev, 3, "brain.Event:2", 13);
    mp_tb_record(t);
    return 0;
}

/* One event at `step` with n scalars tags[i] = v[i]. */
static inline void mp_tb_scalars(MpTb *t, double wall, int64_t step, const char *const *tags,
                                 const double *v, int n)
{
    MpBuf sum = {NULL, 0, 0, 0}, val = {NULL, 0, 0, 0};
    if (!t->f)
        return;
    for (int i = 0; i < n; i++) {
        float x = (float)v[i];
        unsigned char f[5] = {2 << 3 | 5};
        uint32_t bits;
        memcpy(&bits, &x, 4);
        mp_tb_le(f + 1, bits, 4);
        val.len = 0;
        mp_pb_bytes(&val, 1, tags[i], strlen(tags[i]));
        mp_buf_add(&val, f, 5);
        mp_pb_bytes(&sum, 1, val.p, val.len);
    }
    mp_tb_event(t, wall, step);
    mp_pb_bytes(&t->ev, 5, sum.p, sum.len);
    mp_tb_record(t);
    mp_buf_free(&sum);
    mp_buf_free(&val);
}

static inline int mp_tb_flush(MpTb *t, MpErr *e)
{
    if (t->f && (t->ev.oom || fflush(t->f) || ferror(t->f)))
        return mp_errf(e, "%s: write failed", t->path);
    return 0;
}

static inline int mp_tb_close(MpTb *t, MpErr *e)
{
    int rc = mp_tb_flush(t, e);
    if (t->f && fclose(t->f) && !rc)
        rc = mp_errf(e, "%s: write failed", t->path);
    free(t->path);
    mp_buf_free(&t->ev);
    memset(t, 0, sizeof t[0]);
    return rc;
}

#endif
