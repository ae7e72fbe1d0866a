/* Preloaded into every dynamically linked program of the sandbox image (/etc/ld.so.preload).
 *
 * Some gVisor releases (Debian's runsc 0.0~20221219 among them) answer EINVAL to statx and
 * fstatat whenever the flags carry AT_NO_AUTOMOUNT, a flag they do not know. coreutils 9.1
 * passes it on every statx call, so `ls -l`, `stat` and friends fail with "Invalid argument".
 * gVisor has no automount points, so the call without the flag means the same thing there.
 *
 * Each wrapper calls glibc's own function first, unchanged. Only when that fails with EINVAL
 * and AT_NO_AUTOMOUNT was set does it try once more without the flag; if that succeeds, the
 * kernel is one that rejects the flag, and later calls of this process leave it out at once.
 * On Linux (runc) the first call succeeds and nothing else happens. No state but that one
 * bit, no allocation, no I/O.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

typedef int statx_fn(int, const char *, int, unsigned int, struct statx *);

/* Set once a retry without AT_NO_AUTOMOUNT has worked. Relaxed atomics: a thread that reads
 * a stale 0 only makes one extra call. */
static int strip_no_automount;

static int known_to_strip(void) {
    return __atomic_load_n(&strip_no_automount, __ATOMIC_RELAXED);
}

static int should_retry(int result, int flags) {
    return result != 0 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT);
}

static void note_retry_worked(int result) {
    if (result == 0)
        __atomic_store_n(&strip_no_automount, 1, __ATOMIC_RELAXED);
}

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf) {
    static statx_fn *next;
    if (!next)
        next = (statx_fn *)dlsym(RTLD_NEXT, "statx");
    if (!next) {
        errno = ENOSYS;
        return -1;
    }
    if (known_to_strip())
        flags &= ~AT_NO_AUTOMOUNT;
    int result = next(dirfd, path, flags, mask, buf);
    if (should_retry(result, flags)) {
        result = next(dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
        note_retry_worked(result);
    }
    return result;
}

/* fstatat and fstatat64 (the same function on 64-bit glibc, declared with two struct types). */
#define RETRYING_FSTATAT(name, stat_type)                                                   \
    int name(int dirfd, const char *path, stat_type *buf, int flags) {                      \
        static int (*next)(int, const char *, stat_type *, int);                            \
        if (!next)                                                                          \
            next = (int (*)(int, const char *, stat_type *, int))dlsym(RTLD_NEXT, #name);   \
        if (!next) {                                                                        \
            errno = ENOSYS;                                                                 \
            return -1;                                                                      \
        }                                                                                   \
        if (known_to_strip())                                                               \
            flags &= ~AT_NO_AUTOMOUNT;                                                      \
        int result = next(dirfd, path, buf, flags);                                         \
        if (should_retry(result, flags)) {                                                  \
            result = next(dirfd, path, buf, flags & ~AT_NO_AUTOMOUNT);                      \
            note_retry_worked(result);                                                      \
        }                                                                                   \
        return result;                                                                      \
    }

RETRYING_FSTATAT(fstatat, struct stat)
RETRYING_FSTATAT(fstatat64, struct stat64)
