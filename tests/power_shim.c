/* LD_PRELOAD shim of the power-loss test: logs every file-system step under one folder, in order.
 *
 * Compiled at test time with the machine's cc (tests/power_model.py). Environment:
 *   WM_SHIM_ROOT  the folder whose files are logged (it exists, empty, before the run)
 *   WM_SHIM_LOG   the log file (outside the root)
 *   WM_SHIM_MARK  a file outside the root: each write() to it is logged as a MARK (what the workload confirmed)
 *
 * Each call runs under one lock together with its log record, so the log is the order the kernel saw.
 * Record: u32 op, u32 flags, u64 ino, i64 off, u64 len, u32 p1len, u32 p2len, then p1, p2, len bytes of data.
 * Calls the model does not replay (link, symlink, fallocate, sendfile, copy_file_range, truncate, writes
 * through mmap are not intercepted) on a logged file are logged as UNSUPPORTED so the test fails loudly.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { OP_OPEN = 1, OP_WRITE, OP_TRUNC, OP_FSYNC, OP_RENAME, OP_UNLINK, OP_MKDIR, OP_RMDIR, OP_SYNC, OP_MARK,
       OP_UNSUPPORTED, OP_ROOT };
enum { FD_NONE = 0, FD_TRACKED = 1, FD_MARK = 2 };
#define MAX_FD 65536

static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static char root[PATH_MAX];
static size_t root_len;
static char mark[PATH_MAX];
static int log_fd = -1;
static unsigned char fd_kind[MAX_FD];
static uint64_t fd_ino[MAX_FD];
static unsigned char fd_dir[MAX_FD];

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_rmdir)(const char *);
static int (*real_mkdir)(const char *, mode_t);
static int (*real_mkdirat)(int, const char *, mode_t);
static int (*real_close)(int);
static void (*real_sync)(void);
static int (*real_syncfs)(int);
static int (*real_dup)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);
static int (*real_link)(const char *, const char *);
static int (*real_symlink)(const char *, const char *);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_posix_fallocate)(int, off_t, off_t);
static ssize_t (*real_sendfile)(int, int, off_t *, size_t);
static ssize_t (*real_copy_file_range)(int, off_t *, int, off_t *, size_t, unsigned int);
static int (*real_truncate)(const char *, off_t);

static void write_all(const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = real_write(log_fd, p, n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            abort(); /* a log that silently misses a step would make the test meaningless */
        }
        p += w;
        n -= (size_t)w;
    }
}

static void record(uint32_t op, uint32_t flags, uint64_t ino, int64_t off, const char *p1, const char *p2,
                   const void *data, uint64_t len) {
    if (log_fd < 0) return;
    uint32_t l1 = p1 ? (uint32_t)strlen(p1) : 0, l2 = p2 ? (uint32_t)strlen(p2) : 0;
    unsigned char hdr[40];
    memcpy(hdr, &op, 4);
    memcpy(hdr + 4, &flags, 4);
    memcpy(hdr + 8, &ino, 8);
    memcpy(hdr + 16, &off, 8);
    memcpy(hdr + 24, &len, 8);
    memcpy(hdr + 32, &l1, 4);
    memcpy(hdr + 36, &l2, 4);
    write_all(hdr, sizeof hdr);
    if (l1) write_all(p1, l1);
    if (l2) write_all(p2, l2);
    if (len) write_all(data, len);
}

/* Absolute, lexically normalised path of `path` relative to `dirfd`; "" when it cannot be known. */
static void absolute(int dirfd, const char *path, char *out) {
    char base[PATH_MAX], joined[2 * PATH_MAX + 2];
    if (path[0] == '/') {
        snprintf(joined, sizeof joined, "%s", path);
    } else {
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base)) { out[0] = 0; return; }
        } else {
            char proc[64];
            snprintf(proc, sizeof proc, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(proc, base, sizeof base - 1);
            if (n < 0) { out[0] = 0; return; }
            base[n] = 0;
        }
        snprintf(joined, sizeof joined, "%s/%s", base, path);
    }
    /* collapse "//", "/./" and a trailing "/" (".." is left: the workload never uses it) */
    size_t o = 0;
    for (size_t i = 0; joined[i] && o < PATH_MAX - 1; i++) {
        if (joined[i] == '/' && o > 0 && out[o - 1] == '/') continue;
        if (joined[i] == '.' && o > 0 && out[o - 1] == '/' && (joined[i + 1] == '/' || joined[i + 1] == 0)) continue;
        out[o++] = joined[i];
    }
    while (o > 1 && out[o - 1] == '/') o--;
    out[o] = 0;
}

static int under_root(const char *abs) {
    return root_len && strncmp(abs, root, root_len) == 0 && (abs[root_len] == '/' || abs[root_len] == 0);
}

__attribute__((constructor)) static void init(void) {
#define RESOLVE(name) real_##name = dlsym(RTLD_NEXT, #name)
    RESOLVE(open); RESOLVE(open64); RESOLVE(openat); RESOLVE(openat64); RESOLVE(write); RESOLVE(pwrite);
    RESOLVE(pwrite64); RESOLVE(writev); RESOLVE(ftruncate); RESOLVE(ftruncate64); RESOLVE(fsync);
    RESOLVE(fdatasync); RESOLVE(rename); RESOLVE(renameat); RESOLVE(renameat2); RESOLVE(unlink);
    RESOLVE(unlinkat); RESOLVE(rmdir); RESOLVE(mkdir); RESOLVE(mkdirat); RESOLVE(close); RESOLVE(sync);
    RESOLVE(syncfs); RESOLVE(dup); RESOLVE(dup2); RESOLVE(dup3); RESOLVE(link); RESOLVE(symlink);
    RESOLVE(fallocate); RESOLVE(posix_fallocate); RESOLVE(sendfile); RESOLVE(copy_file_range); RESOLVE(truncate);
    const char *r = getenv("WM_SHIM_ROOT"), *l = getenv("WM_SHIM_LOG"), *m = getenv("WM_SHIM_MARK");
    if (!r || !l || !m) return;
    snprintf(root, sizeof root, "%s", r);
    root_len = strlen(root);
    snprintf(mark, sizeof mark, "%s", m);
    log_fd = real_open(l, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    struct stat st;
    if (log_fd >= 0 && stat(root, &st) == 0) record(OP_ROOT, 0, st.st_ino, 0, root, NULL, NULL, 0);
}

static int after_open(int fd, int dirfd, const char *path, int flags) {
    if (fd < 0 || fd >= MAX_FD || log_fd < 0) return fd;
    char abs[PATH_MAX];
    absolute(dirfd, path, abs);
    fd_kind[fd] = FD_NONE;
    if (strcmp(abs, mark) == 0) {
        fd_kind[fd] = FD_MARK;
    } else if (under_root(abs)) {
        struct stat st;
        if (fstat(fd, &st) == 0) {
            fd_kind[fd] = FD_TRACKED;
            fd_ino[fd] = st.st_ino;
            fd_dir[fd] = S_ISDIR(st.st_mode);
            record(OP_OPEN, (uint32_t)(flags & (O_CREAT | O_TRUNC)), st.st_ino, fd_dir[fd], abs, NULL, NULL, 0);
        }
    }
    return fd;
}

#define OPEN_BODY(call, dirfd)                                                  \
    mode_t mode = 0;                                                            \
    if (flags & (O_CREAT | O_TMPFILE)) {                                        \
        va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); \
    }                                                                           \
    pthread_mutex_lock(&lock);                                                  \
    int fd = call;                                                              \
    int saved = errno;                                                          \
    after_open(fd, dirfd, path, flags);                                         \
    pthread_mutex_unlock(&lock);                                                \
    errno = saved;                                                              \
    return fd;

int open(const char *path, int flags, ...) { OPEN_BODY(real_open(path, flags, mode), AT_FDCWD) }
int open64(const char *path, int flags, ...) { OPEN_BODY(real_open64(path, flags, mode), AT_FDCWD) }
int openat(int dirfd, const char *path, int flags, ...) { OPEN_BODY(real_openat(dirfd, path, flags, mode), dirfd) }
int openat64(int dirfd, const char *path, int flags, ...) {
    OPEN_BODY(real_openat64(dirfd, path, flags, mode), dirfd)
}

static int kind(int fd) { return fd >= 0 && fd < MAX_FD ? fd_kind[fd] : FD_NONE; }

ssize_t write(int fd, const void *buf, size_t n) {
    if (kind(fd) == FD_NONE) return real_write(fd, buf, n);
    pthread_mutex_lock(&lock);
    ssize_t w = real_write(fd, buf, n);
    int saved = errno;
    if (w > 0) {
        if (kind(fd) == FD_MARK) {
            record(OP_MARK, 0, 0, 0, NULL, NULL, buf, (uint64_t)w);
        } else {
            off_t end = lseek(fd, 0, SEEK_CUR);
            record(OP_WRITE, 0, fd_ino[fd], (int64_t)(end - w), NULL, NULL, buf, (uint64_t)w);
        }
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return w;
}

#define PWRITE_BODY(call)                                                                  \
    if (kind(fd) != FD_TRACKED) return call;                                               \
    pthread_mutex_lock(&lock);                                                             \
    ssize_t w = call;                                                                      \
    int saved = errno;                                                                     \
    if (w > 0) record(OP_WRITE, 0, fd_ino[fd], (int64_t)off, NULL, NULL, buf, (uint64_t)w); \
    pthread_mutex_unlock(&lock);                                                           \
    errno = saved;                                                                         \
    return w;

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { PWRITE_BODY(real_pwrite(fd, buf, n, off)) }
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { PWRITE_BODY(real_pwrite64(fd, buf, n, off)) }

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    if (kind(fd) != FD_TRACKED) return real_writev(fd, iov, cnt);
    pthread_mutex_lock(&lock);
    ssize_t w = real_writev(fd, iov, cnt);
    int saved = errno;
    if (w > 0) {
        off_t end = lseek(fd, 0, SEEK_CUR);
        char *joined = malloc((size_t)w);
        size_t o = 0;
        for (int i = 0; i < cnt && o < (size_t)w; i++) {
            size_t take = iov[i].iov_len < (size_t)w - o ? iov[i].iov_len : (size_t)w - o;
            memcpy(joined + o, iov[i].iov_base, take);
            o += take;
        }
        record(OP_WRITE, 0, fd_ino[fd], (int64_t)(end - w), NULL, NULL, joined, (uint64_t)w);
        free(joined);
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return w;
}

#define FD_CALL(call, op, offv)                                                          \
    if (kind(fd) != FD_TRACKED) return call;                                             \
    pthread_mutex_lock(&lock);                                                           \
    int r = call;                                                                        \
    int saved = errno;                                                                   \
    if (r == 0) record(op, fd_dir[fd], fd_ino[fd], (int64_t)(offv), NULL, NULL, NULL, 0); \
    pthread_mutex_unlock(&lock);                                                         \
    errno = saved;                                                                       \
    return r;

int ftruncate(int fd, off_t len) { FD_CALL(real_ftruncate(fd, len), OP_TRUNC, len) }
int ftruncate64(int fd, off_t len) { FD_CALL(real_ftruncate64(fd, len), OP_TRUNC, len) }
int fsync(int fd) { FD_CALL(real_fsync(fd), OP_FSYNC, 0) }
int fdatasync(int fd) { FD_CALL(real_fdatasync(fd), OP_FSYNC, 0) }

#define PATH2_CALL(call, op, d1, p1, d2, p2)             \
    pthread_mutex_lock(&lock);                           \
    char a1[PATH_MAX], a2[PATH_MAX];                     \
    absolute(d1, p1, a1);                                \
    absolute(d2, p2, a2);                                \
    int r = call;                                        \
    int saved = errno;                                   \
    if (r == 0 && (under_root(a1) || under_root(a2)))    \
        record(op, 0, 0, 0, a1, a2, NULL, 0);            \
    pthread_mutex_unlock(&lock);                         \
    errno = saved;                                       \
    return r;

int rename(const char *a, const char *b) { PATH2_CALL(real_rename(a, b), OP_RENAME, AT_FDCWD, a, AT_FDCWD, b) }
int renameat(int da, const char *a, int db, const char *b) {
    PATH2_CALL(real_renameat(da, a, db, b), OP_RENAME, da, a, db, b)
}
int renameat2(int da, const char *a, int db, const char *b, unsigned int fl) {
    PATH2_CALL(real_renameat2(da, a, db, b, fl), fl ? OP_UNSUPPORTED : OP_RENAME, da, a, db, b)
}
int link(const char *a, const char *b) { PATH2_CALL(real_link(a, b), OP_UNSUPPORTED, AT_FDCWD, a, AT_FDCWD, b) }
int symlink(const char *a, const char *b) {
    PATH2_CALL(real_symlink(a, b), OP_UNSUPPORTED, AT_FDCWD, b, AT_FDCWD, b)
}

#define PATH_CALL(call, op, d, p)                       \
    pthread_mutex_lock(&lock);                          \
    char a[PATH_MAX];                                   \
    absolute(d, p, a);                                  \
    int r = call;                                       \
    int saved = errno;                                  \
    if (r == 0 && under_root(a)) {                      \
        struct stat st;                                 \
        uint64_t ino = 0;                               \
        if ((op) == OP_MKDIR && stat(a, &st) == 0) ino = st.st_ino; \
        record(op, 0, ino, 0, a, NULL, NULL, 0);        \
    }                                                   \
    pthread_mutex_unlock(&lock);                        \
    errno = saved;                                      \
    return r;

int unlink(const char *p) { PATH_CALL(real_unlink(p), OP_UNLINK, AT_FDCWD, p) }
int unlinkat(int d, const char *p, int fl) {
    PATH_CALL(real_unlinkat(d, p, fl), (fl & AT_REMOVEDIR) ? OP_RMDIR : OP_UNLINK, d, p)
}
int rmdir(const char *p) { PATH_CALL(real_rmdir(p), OP_RMDIR, AT_FDCWD, p) }
int mkdir(const char *p, mode_t m) { PATH_CALL(real_mkdir(p, m), OP_MKDIR, AT_FDCWD, p) }
int mkdirat(int d, const char *p, mode_t m) { PATH_CALL(real_mkdirat(d, p, m), OP_MKDIR, d, p) }
int truncate(const char *p, off_t len) { PATH_CALL(real_truncate(p, len), OP_UNSUPPORTED, AT_FDCWD, p) }

int close(int fd) {
    if (kind(fd) == FD_NONE) return real_close(fd);
    pthread_mutex_lock(&lock);
    fd_kind[fd] = FD_NONE;
    int r = real_close(fd);
    int saved = errno;
    pthread_mutex_unlock(&lock);
    errno = saved;
    return r;
}

void sync(void) {
    pthread_mutex_lock(&lock);
    real_sync();
    record(OP_SYNC, 0, 0, 0, NULL, NULL, NULL, 0);
    pthread_mutex_unlock(&lock);
}

int syncfs(int fd) {
    pthread_mutex_lock(&lock);
    int r = real_syncfs(fd);
    int saved = errno;
    if (r == 0) record(OP_SYNC, 0, 0, 0, NULL, NULL, NULL, 0);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return r;
}

static int copy_kind(int from, int to) {
    if (to >= 0 && to < MAX_FD) {
        fd_kind[to] = kind(from);
        if (from >= 0 && from < MAX_FD) { fd_ino[to] = fd_ino[from]; fd_dir[to] = fd_dir[from]; }
    }
    return to;
}

int dup(int fd) {
    pthread_mutex_lock(&lock);
    int r = real_dup(fd);
    int saved = errno;
    if (r >= 0) copy_kind(fd, r);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return r;
}
int dup2(int fd, int to) {
    pthread_mutex_lock(&lock);
    int r = real_dup2(fd, to);
    int saved = errno;
    if (r >= 0) copy_kind(fd, r);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return r;
}
int dup3(int fd, int to, int fl) {
    pthread_mutex_lock(&lock);
    int r = real_dup3(fd, to, fl);
    int saved = errno;
    if (r >= 0) copy_kind(fd, r);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return r;
}

static void unsupported_fd(int fd, const char *name) {
    if (kind(fd) == FD_TRACKED) {
        pthread_mutex_lock(&lock);
        record(OP_UNSUPPORTED, 0, fd_ino[fd], 0, name, NULL, NULL, 0);
        pthread_mutex_unlock(&lock);
    }
}

int fallocate(int fd, int m, off_t o, off_t l) { unsupported_fd(fd, "fallocate"); return real_fallocate(fd, m, o, l); }
int posix_fallocate(int fd, off_t o, off_t l) {
    unsupported_fd(fd, "posix_fallocate");
    return real_posix_fallocate(fd, o, l);
}
ssize_t sendfile(int out, int in, off_t *o, size_t n) {
    unsupported_fd(out, "sendfile");
    return real_sendfile(out, in, o, n);
}
ssize_t copy_file_range(int in, off_t *oi, int out, off_t *oo, size_t n, unsigned int fl) {
    unsupported_fd(out, "copy_file_range");
    return real_copy_file_range(in, oi, out, oo, n, fl);
}
