/* One file's bytes made those of another by writing only the blocks that differ
 * (store/pages.py; a replica brings its standby copy level with follow mode's file).
 * The same answer as the Python in pages.py, which tests/store/test_pages.py compares. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define CHUNK (1 << 20) /* bytes compared at once */
#define BLOCK 4096      /* bytes written at least: a page of most file systems */

/* Up to ``count`` bytes at ``offset``: fewer only at the file's end; -1 on an error. */
static ssize_t read_at(int fd, char *buffer, size_t count, off_t offset) {
    size_t done = 0;
    while (done < count) {
        ssize_t got = pread(fd, buffer + done, count - done, offset + (off_t)done);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (got == 0)
            break;
        done += (size_t)got;
    }
    return (ssize_t)done;
}

static int write_at(int fd, const char *buffer, size_t count, off_t offset) {
    size_t done = 0;
    while (done < count) {
        ssize_t put = pwrite(fd, buffer + done, count - done, offset + (off_t)done);
        if (put < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        done += (size_t)put;
    }
    return 0;
}

/* Whether block [i, i + n) of ``a`` is the same in ``b``, of which ``have`` bytes were read. */
static int same_block(const char *a, const char *b, size_t have, size_t i, size_t n) {
    return i + n <= have && memcmp(a + i, b + i, n) == 0;
}

static PyObject *patch(PyObject *self, PyObject *args) {
    int source, target;
    long long size;
    (void)self;
    if (!PyArg_ParseTuple(args, "iiL", &source, &target, &size))
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "size must not be negative");
        return NULL;
    }
    char *a = malloc(CHUNK), *b = malloc(CHUNK);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return PyErr_NoMemory();
    }
    long long offset = 0, written = 0;
    int error = 0;
    Py_BEGIN_ALLOW_THREADS
    while (offset < size) {
        size_t want = size - offset < CHUNK ? (size_t)(size - offset) : CHUNK;
        ssize_t got = read_at(source, a, want, (off_t)offset);
        if (got <= 0) {
            error = got < 0 ? errno : 0;
            break;
        }
        ssize_t have = read_at(target, b, (size_t)got, (off_t)offset);
        if (have < 0) {
            error = errno;
            break;
        }
        size_t length = (size_t)got, kept = (size_t)have;
        if (kept != length || memcmp(a, b, length) != 0) {
            size_t i = 0;
            while (i < length) {
                size_t n = length - i < BLOCK ? length - i : BLOCK;
                if (same_block(a, b, kept, i, n)) {
                    i += n;
                    continue;
                }
                size_t start = i; /* a run of differing blocks, written at once */
                while (i < length) {
                    n = length - i < BLOCK ? length - i : BLOCK;
                    if (same_block(a, b, kept, i, n))
                        break;
                    i += n;
                }
                if (write_at(target, a + start, i - start, (off_t)(offset + (long long)start)) < 0) {
                    error = errno;
                    break;
                }
                written += (long long)(i - start);
            }
            if (error)
                break;
        }
        offset += (long long)length;
        if (length < want)
            break; /* the source ended sooner */
    }
    if (!error && ftruncate(target, (off_t)offset) != 0)
        error = errno;
    Py_END_ALLOW_THREADS
    free(a);
    free(b);
    if (error) {
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("LL", offset, written);
}

static PyMethodDef methods[] = {
    {"patch", patch, METH_VARARGS,
     "patch(source, target, size) -> (copied, written): the target's bytes made the first "
     "size bytes of the source (fewer when it ends sooner; the target cut there), writing "
     "only the 4 KiB blocks that differ."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pages", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pages(void) { return PyModule_Create(&module); }
