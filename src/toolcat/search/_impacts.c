/* BM25 candidates with upper bounds, term at a time over quantized impacts (search/native.py).

   Each (term, tool) posting holds its bm25() contribution ``(idf * f) / (f + norm)``
   rounded UP to a multiple of its term's quantum (a 16-bit count of quanta; the term's IDF
   / 65534: a contribution is below its IDF). A query adds each of its terms' quanta times
   the term's quantum (a whole number of the query's units, rounded up) per tool; a tool's
   sum is at least its exact score (the same contributions, each rounded up), so the tools
   with the best sums, rescored exactly best sum first, certify the exact top k as
   tantivy's scores do (lexical_index.py's ``rank``). Every posting is visited: no pruning,
   a few nanoseconds each.

   The packed tools may come from a saved index on disk (input): every blob is read within
   its length, a term id outside the vocabulary is passed over, a term a tool repeats counts
   once (its first count, as ``_decode`` reads it), and a contribution that is not a finite
   number within the bound makes the index ``bounded`` False (then it must not be used). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SCRATCH 8
#define QUANTA 65535.0
/* A term's quantum: its IDF / 65534, so that a contribution a hair under the IDF (rounded
   to it) is still at most QUANTA quanta. One quantum for every term (the largest IDF's)
   rounded a common term's contributions (IDF floored at 1e-6) all up to one quantum: every
   tool holding it tied, and a query of it rescored them all. */
#define PER_IDF 65534.0
/* The smallest quantum: a query's unit (its largest quantum / 2^32) stays a normal number. */
#define LEAST_QUANTUM 0x1p-900
/* Tools are summed a block at a time, so that a block's sums and marks stay in the core's
   cache while every query term's postings in it are added (each term's postings are in
   tool order: one cursor per term walks them block by block). */
#define BLOCK 16384
#define ESCAPE 0xFFFF

typedef struct {
    uint64_t acc[BLOCK];          /* a tool's bound so far, in the query's units */
    uint64_t seen[BLOCK / 64];    /* whether a tool holds a query term */
} Scratch;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n_docs;
    Py_ssize_t n_terms;
    int64_t *rows;       /* tool index -> row id, ascending (``mask`` finds rows by halving) */
    uint64_t *offsets;   /* term id -> its postings: offsets[t] .. offsets[t + 1] */
    uint64_t *gap_offsets; /* term id -> where its tools' gaps start in ``gaps`` */
    /* Each term's tools, ascending, as the gap from the one before (from -1 for the
       first); a gap of ESCAPE or more is ESCAPE and the tool index in two halves. 16 bits
       a posting instead of 32: 75 MB less at a million tools. */
    uint16_t *gaps;
    uint16_t *impacts;   /* postings: the contribution in its term's quanta, rounded up */
    double *quantum;     /* term id -> its quantum */
    uint16_t *most;      /* term id -> its largest impact, in its quanta */
    /* For exact scores (``best``): the packed tools in tool order (a list of bytes, never
       handed out: read without the GIL), their length normalisations and the IDFs. */
    PyObject *blobs;
    double *norms;
    double *idf;
    int is_double;
    uint64_t n_postings;
    int bounded;
    Scratch *free_scratch[MAX_SCRATCH];
    int n_free;
} Index;

static void Index_dealloc(Index *self) {
    free(self->rows);
    free(self->offsets);
    free(self->gap_offsets);
    free(self->gaps);
    free(self->impacts);
    free(self->quantum);
    free(self->most);
    free(self->norms);
    free(self->idf);
    Py_XDECREF(self->blobs);
    for (int i = 0; i < self->n_free; i++) free(self->free_scratch[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* One blob's layout, as ``_unpack`` reads it: a uint32 length, n uint32 term ids, n counts
   (uint32 or double), n = (size - 4) // (4 + count size); bytes past that are ignored. */
typedef struct {
    uint32_t length;
    Py_ssize_t n;
    const unsigned char *ids;
    const unsigned char *counts;
} Packed;

static void unpack(const unsigned char *data, Py_ssize_t size, Py_ssize_t count_size,
                   Packed *out) {
    memcpy(&out->length, data, 4); /* size >= 4: checked as the blobs were gathered */
    out->n = (size - 4) / (4 + count_size);
    out->ids = data + 4;
    out->counts = data + 4 + 4 * out->n;
}

static double count_at(const Packed *p, Py_ssize_t i, int is_double) {
    if (is_double) {
        double v;
        memcpy(&v, p->counts + 8 * i, 8);
        return v;
    }
    uint32_t v;
    memcpy(&v, p->counts + 4 * i, 4);
    return (double)v;
}

static uint32_t term_at(const Packed *p, Py_ssize_t i) {
    uint32_t t;
    memcpy(&t, p->ids + 4 * i, 4);
    return t;
}

typedef struct {
    int64_t row;
    PyObject *blob;
    const unsigned char *data;
    Py_ssize_t size;
} Packed_row;

static int by_row(const void *x, const void *y) {
    const Packed_row *a = x, *b = y;
    return (a->row > b->row) - (a->row < b->row);
}

static PyObject *Index_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"tools", "typecode", "idf", "scale", "k1", "b", "avgdl", NULL};
    PyObject *tools;
    const char *typecode;
    Py_buffer idf_buf;
    double scale, k1, b, avgdl;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!sy*dddd", kwlist, &PyDict_Type, &tools,
                                     &typecode, &idf_buf, &scale, &k1, &b, &avgdl))
        return NULL;
    int is_double;
    if (strcmp(typecode, "I") == 0) is_double = 0;
    else if (strcmp(typecode, "d") == 0) is_double = 1;
    else {
        PyBuffer_Release(&idf_buf);
        PyErr_SetString(PyExc_ValueError, "counts are 'I' or 'd'");
        return NULL;
    }
    Py_ssize_t count_size = is_double ? 8 : 4;
    if (idf_buf.len % (Py_ssize_t)sizeof(double) != 0) {
        PyBuffer_Release(&idf_buf);
        PyErr_SetString(PyExc_ValueError, "idf must be an array of doubles");
        return NULL;
    }
    Index *self = (Index *)type->tp_alloc(type, 0);
    if (self == NULL) {
        PyBuffer_Release(&idf_buf);
        return NULL;
    }
    const double *idf = (const double *)idf_buf.buf;
    const Py_ssize_t n_terms = idf_buf.len / (Py_ssize_t)sizeof(double);
    const Py_ssize_t n_docs = PyDict_GET_SIZE(tools);
    PyObject *blobs = NULL; /* the dict's values: they stay alive while the GIL is let go */
    Packed_row *packed = NULL; /* the tools in row order */
    uint32_t *last = NULL; /* term id -> 1 + the tool index that last held it */
    uint64_t *fill = NULL;
    double *norms = NULL;
    int out_of_memory = 0;
    self->n_terms = n_terms;
    self->n_docs = n_docs;
    self->bounded = 1;
    if ((uint64_t)n_docs >= UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many tools for one index");
        goto fail;
    }
    const size_t docs_n = n_docs ? (size_t)n_docs : 1, terms_n = n_terms ? (size_t)n_terms : 1;
    /* Every contribution is below its term's IDF (f / (f + norm) < 1). */
    self->quantum = malloc(sizeof(double) * terms_n);
    if (!self->quantum) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t t = 0; t < n_terms; t++) {
        const double quantum = idf[t] / PER_IDF;
        if (!isfinite(idf[t]) || idf[t] < 0.0) { /* a forged IDF */
            self->bounded = 0;
            self->quantum[t] = 1.0;
        } else if (quantum >= LEAST_QUANTUM) {
            self->quantum[t] = quantum;
        } else { /* 0 (its contributions are 0) or a tiny IDF: at most one quantum each */
            self->quantum[t] = idf[t] > 0.0 ? LEAST_QUANTUM : 1.0;
        }
    }
    self->idf = malloc(sizeof(double) * terms_n);
    self->most = calloc(terms_n, sizeof(uint16_t));
    if (!self->idf || !self->most) {
        PyErr_NoMemory();
        goto fail;
    }
    if (n_terms) memcpy(self->idf, idf, sizeof(double) * (size_t)n_terms);
    self->is_double = is_double;
    self->offsets = calloc((size_t)n_terms + 1, sizeof(uint64_t));
    self->gap_offsets = calloc((size_t)n_terms + 1, sizeof(uint64_t));
    self->rows = malloc(sizeof(int64_t) * docs_n);
    packed = malloc(sizeof(*packed) * docs_n);
    norms = malloc(sizeof(double) * docs_n);
    last = calloc(terms_n, sizeof(uint32_t));
    fill = malloc(sizeof(uint64_t) * terms_n);
    if (!self->offsets || !self->gap_offsets || !self->rows || !packed || !norms || !last ||
        !fill) {
        PyErr_NoMemory();
        goto fail;
    }
    blobs = PyList_New(n_docs);
    if (blobs == NULL) goto fail;
    Py_ssize_t pos = 0, d = 0;
    PyObject *key, *value;
    while (PyDict_Next(tools, &pos, &key, &value)) {
        if (d >= n_docs) break;
        if (!PyBytes_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "a packed tool must be bytes");
            goto fail;
        }
        if (PyBytes_GET_SIZE(value) < 4) {
            PyErr_SetString(PyExc_ValueError, "a packed tool shorter than its length field");
            goto fail;
        }
        if (!PyLong_Check(key)) { /* read as is: no ``__index__`` run while the dict is read */
            PyErr_SetString(PyExc_TypeError, "a row id must be an int");
            goto fail;
        }
        int64_t row = PyLong_AsLongLong(key);
        if (row == -1 && PyErr_Occurred()) goto fail;
        Py_INCREF(value);
        PyList_SET_ITEM(blobs, d, value);
        packed[d].row = row;
        packed[d].blob = value;
        packed[d].data = (const unsigned char *)PyBytes_AS_STRING(value);
        packed[d].size = PyBytes_GET_SIZE(value);
        d++;
    }
    if (d != n_docs) {
        PyErr_SetString(PyExc_RuntimeError, "the tools changed while indexed");
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    qsort(packed, (size_t)n_docs, sizeof(*packed), by_row);
    for (Py_ssize_t i_doc = 0; i_doc < n_docs; i_doc++) self->rows[i_doc] = packed[i_doc].row;
    /* Pass 1: how many tools hold each term (a term once per tool). */
    for (Py_ssize_t i_doc = 0; i_doc < n_docs; i_doc++) {
        Packed p;
        unpack(packed[i_doc].data, packed[i_doc].size, count_size, &p);
        norms[i_doc] = scale * k1 * (1.0 - b + b * (double)p.length / avgdl); /* as ``_decode`` */
        for (Py_ssize_t i = 0; i < p.n; i++) {
            uint32_t t = term_at(&p, i);
            if ((Py_ssize_t)t >= n_terms || last[t] == (uint32_t)i_doc + 1) continue;
            /* last[t] - 1: the term's tool before, -1 for none (the gap from it) */
            self->gap_offsets[t + 1] += ((uint32_t)i_doc + 1 - last[t]) >= ESCAPE ? 3 : 1;
            last[t] = (uint32_t)i_doc + 1;
            self->offsets[t + 1]++;
        }
    }
    for (Py_ssize_t t = 0; t < n_terms; t++) {
        self->offsets[t + 1] += self->offsets[t];
        self->gap_offsets[t + 1] += self->gap_offsets[t];
    }
    self->n_postings = self->offsets[n_terms];
    const uint64_t n_gaps = self->gap_offsets[n_terms];
    self->gaps = malloc(sizeof(uint16_t) * (n_gaps ? n_gaps : 1));
    self->impacts = malloc(sizeof(uint16_t) * (self->n_postings ? self->n_postings : 1));
    uint64_t *gap_fill = malloc(sizeof(uint64_t) * terms_n);
    if (!self->gaps || !self->impacts || !gap_fill) {
        out_of_memory = 1;
    } else {
        /* Pass 2: the postings, tools in order. */
        memcpy(fill, self->offsets, sizeof(uint64_t) * (size_t)n_terms);
        memcpy(gap_fill, self->gap_offsets, sizeof(uint64_t) * (size_t)n_terms);
        memset(last, 0, sizeof(uint32_t) * terms_n);
        for (Py_ssize_t i_doc = 0; i_doc < n_docs; i_doc++) {
            Packed p;
            unpack(packed[i_doc].data, packed[i_doc].size, count_size, &p);
            for (Py_ssize_t i = 0; i < p.n; i++) {
                uint32_t t = term_at(&p, i);
                if ((Py_ssize_t)t >= n_terms || last[t] == (uint32_t)i_doc + 1) continue;
                const uint32_t gap = (uint32_t)i_doc + 1 - last[t];
                if (gap >= ESCAPE) {
                    self->gaps[gap_fill[t]++] = ESCAPE;
                    self->gaps[gap_fill[t]++] = (uint16_t)((uint32_t)i_doc & 0xFFFF);
                    self->gaps[gap_fill[t]++] = (uint16_t)((uint32_t)i_doc >> 16);
                } else {
                    self->gaps[gap_fill[t]++] = (uint16_t)gap;
                }
                last[t] = (uint32_t)i_doc + 1;
                double f = count_at(&p, i, is_double);
                double c = idf[t] * f / (f + norms[i_doc]); /* as ``_score`` adds it */
                double q = ceil(c / self->quantum[t]);
                uint16_t quanta;
                if (c <= 0.0) {
                    quanta = 0; /* adds nothing, or takes away (a forged count) */
                } else if (!(q <= QUANTA)) { /* NaN, infinite or past its IDF */
                    self->bounded = 0;
                    quanta = (uint16_t)QUANTA;
                } else {
                    quanta = (uint16_t)q;
                }
                self->impacts[fill[t]] = quanta;
                if (quanta > self->most[t]) self->most[t] = quanta;
                fill[t]++;
            }
        }
    }
    free(gap_fill);
    Py_END_ALLOW_THREADS
    if (out_of_memory) {
        PyErr_NoMemory();
        goto fail;
    }
    /* The blobs again, in tool order, for ``best``'s exact scores. */
    self->blobs = PyList_New(n_docs);
    if (self->blobs == NULL) goto fail;
    for (Py_ssize_t i_doc = 0; i_doc < n_docs; i_doc++) {
        Py_INCREF(packed[i_doc].blob);
        PyList_SET_ITEM(self->blobs, i_doc, packed[i_doc].blob);
    }
    self->norms = norms;
    norms = NULL;
    Py_DECREF(blobs);
    free(packed);
    free(fill);
    free(last);
    PyBuffer_Release(&idf_buf);
    return (PyObject *)self;
fail:
    Py_XDECREF(blobs);
    free(packed);
    free(fill);
    free(last);
    free(norms);
    PyBuffer_Release(&idf_buf);
    Py_DECREF(self);
    return NULL;
}

static Scratch *take_scratch(Index *self) {
    if (self->n_free > 0) return self->free_scratch[--self->n_free];
    return calloc(1, sizeof(Scratch)); /* all sums 0, nothing seen: as each query leaves it */
}

static void give_scratch(Index *self, Scratch *s) {
    if (self->n_free < MAX_SCRATCH) self->free_scratch[self->n_free++] = s;
    else free(s);
}

typedef struct {
    uint64_t sum;
    int64_t doc; /* the tool's index: rows ascend with it */
} Hit;

#define NONE UINT32_MAX /* no more tools: above every block's end */

/* A query term's place in its postings: the next posting (``at`` of ``stop``), its tool
   (``doc``, NONE past the last) and where the gap after it starts. */
typedef struct {
    uint64_t at, stop, gap_at;
    uint64_t times; /* its term's quantum in the query's units, rounded up */
    double quantum; /* its term's (0: no tool has it) */
    uint32_t doc;
} Cursor;

/* Move ``c->doc`` to the tool of posting ``c->at`` (NONE when there is none). */
static inline void next_doc(const uint16_t *gaps, Cursor *c) {
    if (c->at >= c->stop) {
        c->doc = NONE;
        return;
    }
    const uint16_t gap = gaps[c->gap_at];
    if (gap != ESCAPE) {
        c->doc += gap; /* from NONE (-1), the first gap is the tool index + 1 */
        c->gap_at += 1;
    } else {
        c->doc = (uint32_t)gaps[c->gap_at + 1] | ((uint32_t)gaps[c->gap_at + 2] << 16);
        c->gap_at += 3;
    }
}

/* a ranks below b: a smaller sum, or the same sum and a higher row id */
static inline int below(const Hit *a, const Hit *b) {
    return a->sum < b->sum || (a->sum == b->sum && a->doc > b->doc);
}

typedef struct {
    double score;
    int64_t row;
} Scored;

/* a ranks below b: a lower score, or the same score and a higher row id (FTS5's order) */
static inline int scored_below(const Scored *a, const Scored *b) {
    return a->score < b->score || (a->score == b->score && a->row > b->row);
}

/* A heap of T with the one ranking lowest (``BELOW``) on top, and a sort best first. */
#define HEAP_OF(T, BELOW)                                                                  \
    static inline void T##_swap(T *heap, Py_ssize_t a, Py_ssize_t b) {                     \
        T t = heap[a];                                                                     \
        heap[a] = heap[b];                                                                 \
        heap[b] = t;                                                                       \
    }                                                                                      \
    static void T##_sift_down(T *heap, Py_ssize_t n, Py_ssize_t i) {                       \
        for (;;) {                                                                         \
            Py_ssize_t l = 2 * i + 1, r = l + 1, m = i;                                    \
            if (l < n && BELOW(&heap[l], &heap[m])) m = l;                                 \
            if (r < n && BELOW(&heap[r], &heap[m])) m = r;                                 \
            if (m == i) return;                                                            \
            T##_swap(heap, i, m);                                                          \
            i = m;                                                                         \
        }                                                                                  \
    }                                                                                      \
    static void T##_sift_up(T *heap, Py_ssize_t i) {                                       \
        while (i > 0) {                                                                    \
            Py_ssize_t p = (i - 1) / 2;                                                    \
            if (!BELOW(&heap[i], &heap[p])) return;                                        \
            T##_swap(heap, i, p);                                                          \
            i = p;                                                                         \
        }                                                                                  \
    }                                                                                      \
    /* ``item`` into a heap of at most ``n``, if it ranks above the lowest when full */    \
    static inline void T##_offer(T *heap, Py_ssize_t *size, Py_ssize_t n, T item) {        \
        if (*size < n) {                                                                   \
            heap[*size] = item;                                                            \
            T##_sift_up(heap, (*size)++);                                                  \
        } else if (BELOW(&heap[0], &item)) {                                               \
            heap[0] = item;                                                                \
            T##_sift_down(heap, *size, 0);                                                 \
        }                                                                                  \
    }                                                                                      \
    static int T##_best_first(const void *x, const void *y) {                              \
        const T *a = x, *b = y;                                                            \
        if (BELOW(a, b)) return 1;                                                         \
        if (BELOW(b, a)) return -1;                                                        \
        return 0;                                                                          \
    }

HEAP_OF(Hit, below)
HEAP_OF(Scored, scored_below)

/* A mask's size: a bit a tool, whole 64-bit words. */
static Py_ssize_t mask_bytes(const Index *self) { return (self->n_docs + 63) / 64 * 8; }

/* ``mask_obj`` as a mask of this index's (NULL for None): 0, or -1 with an exception. */
static int mask_of(const Index *self, PyObject *mask_obj, const unsigned char **mask) {
    *mask = NULL;
    if (mask_obj == Py_None) return 0;
    if (!PyBytes_Check(mask_obj) || PyBytes_GET_SIZE(mask_obj) != mask_bytes(self)) {
        PyErr_SetString(PyExc_ValueError, "a mask must be this index's own (``mask``)");
        return -1;
    }
    *mask = (const unsigned char *)PyBytes_AS_STRING(mask_obj);
    return 0;
}

/* A query's terms as cursors at their first postings, and its unit: parsed once a call. */
typedef struct {
    Py_ssize_t n_ids;
    Cursor *cursor; /* as each term starts: copied for each pass over the postings */
    int64_t *ids;   /* the term ids asked, -1 for one outside the vocabulary */
    double unit;
} Query;

static void query_free(Query *q) {
    PyMem_Free(q->cursor);
    PyMem_Free(q->ids);
}

/* Read ``ids_obj`` into ``q`` (0), or set an exception (-1). */
static int query_parse(const Index *self, PyObject *ids_obj, Query *q) {
    q->cursor = NULL;
    q->ids = NULL;
    PyObject *seq = PySequence_Fast(ids_obj, "term ids must be a sequence");
    if (seq == NULL) return -1;
    const Py_ssize_t n_ids = PySequence_Fast_GET_SIZE(seq);
    q->n_ids = n_ids;
    if (n_ids > 65536) { /* a tool's sum must not wrap round */
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "at most 65536 term ids a query");
        return -1;
    }
    q->cursor = PyMem_Malloc(sizeof(Cursor) * (n_ids ? (size_t)n_ids : 1));
    q->ids = PyMem_Malloc(sizeof(int64_t) * (n_ids ? (size_t)n_ids : 1));
    if (q->cursor == NULL || q->ids == NULL) {
        Py_DECREF(seq);
        query_free(q);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n_ids; i++) {
        Py_ssize_t t = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
        if (t == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            query_free(q);
            return -1;
        }
        Cursor *c = &q->cursor[i];
        c->doc = NONE; /* the tool before the first: -1 */
        c->at = c->stop = 0;
        c->quantum = 0.0;
        q->ids[i] = -1;
        if (t >= 0 && t < self->n_terms) {
            q->ids[i] = t;
            c->quantum = self->quantum[t];
            c->at = self->offsets[t];
            c->stop = self->offsets[t + 1];
            c->gap_at = self->gap_offsets[t];
            next_doc(self->gaps, c);
        }
    }
    Py_DECREF(seq);
    /* The query's unit: its largest quantum / 2^32. Each term's quantum is a whole number
       of units, rounded up: at most 2^32 + 1, so a posting adds under 2^48 and 65,536 terms
       cannot wrap round; a common term's quantum beside a rare one's is rounded up by a
       thousandth at most (IDFs 1e7 apart). Whole numbers: a sum in doubles cost 18% more. */
    double largest = 0.0;
    for (Py_ssize_t i = 0; i < n_ids; i++)
        if (q->cursor[i].quantum > largest) largest = q->cursor[i].quantum;
    q->unit = ldexp(largest, -32);
    for (Py_ssize_t i = 0; i < n_ids; i++) {
        const double times = ceil(q->cursor[i].quantum / q->unit);
        /* at least 1 (a quantum 2^1000 times smaller rounds to 0 units: a forged IDF) */
        q->cursor[i].times = q->cursor[i].quantum <= 0.0 ? 0 : times < 1.0 ? 1 : (uint64_t)times;
    }
    return 0;
}

/* A sum's bound on the exact score: a contribution's quanta, a quantum's units and a sum's
   conversion may each round down by a unit in the last place (and the exact sum up), so a
   bound a little above the sum never falls below the exact score. */
static double bound_of(const Query *q, uint64_t sum) {
    const double margin = 1.0 + 1e-12 + (2.0 * (double)q->n_ids + 8.0) * DBL_EPSILON;
    return (double)sum * q->unit * margin;
}

/* The ``n`` tools with the largest sums of the query terms' impacts (the terms with
   ``skip[i]`` set left out), among the tools holding one of the others and let through by
   ``mask``, into ``heap``, best first: how many. Without the GIL. */
static Py_ssize_t gather(const Index *self, const Query *q, const char *skip,
                         const unsigned char *mask, Scratch *s, Cursor *cursor, Hit *heap,
                         Py_ssize_t n) {
    const Py_ssize_t n_ids = q->n_ids;
    for (Py_ssize_t i = 0; i < n_ids; i++) {
        cursor[i] = q->cursor[i];
        if (skip && skip[i]) cursor[i].doc = NONE;
    }
    Py_ssize_t n_heap = 0;
    uint64_t *acc = s->acc;
    uint64_t *seen = s->seen;
    const uint16_t *gaps = self->gaps;
    const uint16_t *impacts = self->impacts;
    for (Py_ssize_t start = 0; start < self->n_docs; start += BLOCK) {
        const Py_ssize_t stop_doc = start + BLOCK < self->n_docs ? start + BLOCK : self->n_docs;
        const uint32_t end = (uint32_t)stop_doc;
        for (Py_ssize_t i = 0; i < n_ids; i++) {
            Cursor c = cursor[i];
            const uint64_t times = c.times;
            while (c.doc < end) {
                const uint32_t doc = c.doc - (uint32_t)start;
                seen[doc >> 6] |= (uint64_t)1 << (doc & 63);
                acc[doc] += times * impacts[c.at];
                c.at++;
                next_doc(gaps, &c);
            }
            cursor[i] = c;
        }
        /* The block's tools holding a query term, in tool order; the sums left at 0. */
        const Py_ssize_t words = (stop_doc - start + 63) / 64;
        for (Py_ssize_t w = 0; w < words; w++) {
            uint64_t bits = seen[w];
            if (!bits) continue;
            seen[w] = 0;
            if (mask != NULL) {
                uint64_t let;
                memcpy(&let, mask + (size_t)(start / 64 + w) * 8, 8);
                for (uint64_t out = bits & ~let; out; out &= out - 1)
                    acc[w * 64 + __builtin_ctzll(out)] = 0;
                bits &= let;
            }
            while (bits) {
                uint32_t doc = (uint32_t)(w * 64 + __builtin_ctzll(bits));
                bits &= bits - 1;
                uint64_t sum = acc[doc];
                acc[doc] = 0;
                if (n_heap == n && sum < heap[0].sum) continue;
                Hit_offer(heap, &n_heap, n, (Hit){sum, start + doc});
            }
        }
    }
    qsort(heap, (size_t)n_heap, sizeof(Hit), Hit_best_first);
    return n_heap;
}

/* top(term_ids, n, mask=None) -> [(bound, row id)], the n tools with the largest bounds,
   largest first, among the tools holding a query term (and, with a mask, let through by it):
   ids < 0 (no tool has the term) add nothing; a term asked twice adds its bound twice
   (``_score`` adds its contribution twice). ``rank`` asks ``best``; the bounds alone, which
   its certificate rests on, are for tests and probes. */
static PyObject *Index_top(Index *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"term_ids", "n", "mask", NULL};
    PyObject *ids_obj, *mask_obj = Py_None;
    Py_ssize_t n;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "On|O", kwlist, &ids_obj, &n, &mask_obj))
        return NULL;
    const unsigned char *mask = NULL;
    if (mask_of(self, mask_obj, &mask) < 0) return NULL;
    if (n < 1) return PyList_New(0);
    if (n > self->n_docs) n = self->n_docs ? self->n_docs : 1;
    Query q;
    if (query_parse(self, ids_obj, &q) < 0) return NULL;
    Cursor *cursor = PyMem_Malloc(sizeof(Cursor) * (q.n_ids ? (size_t)q.n_ids : 1));
    Hit *heap = PyMem_Malloc(sizeof(Hit) * (size_t)n);
    Scratch *s = take_scratch(self);
    if (cursor == NULL || heap == NULL || s == NULL) {
        query_free(&q);
        PyMem_Free(cursor);
        PyMem_Free(heap);
        if (s) give_scratch(self, s);
        return PyErr_NoMemory();
    }
    Py_ssize_t n_heap;
    Py_BEGIN_ALLOW_THREADS
    n_heap = gather(self, &q, NULL, mask, s, cursor, heap, n);
    Py_END_ALLOW_THREADS
    give_scratch(self, s);
    PyMem_Free(cursor);
    PyObject *out = PyList_New(n_heap);
    for (Py_ssize_t i = 0; out != NULL && i < n_heap; i++) {
        PyObject *item = Py_BuildValue("(dL)", bound_of(&q, heap[i].sum),
                                       (long long)self->rows[heap[i].doc]);
        if (item == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, item);
    }
    query_free(&q);
    PyMem_Free(heap);
    return out;
}

/* A query's term ids hashed to their places in it: ``first`` maps an id to the first place
   asking it, ``then`` a place to the next asking the same id (a term asked twice). */
typedef struct {
    int64_t *key;     /* term id, -1 for an empty slot */
    int32_t *first;
    int32_t *then;
    uint64_t slots;   /* a power of 2 */
} Places;

static inline uint64_t slot_of(int64_t t, uint64_t slots) {
    return ((uint64_t)t * 0x9E3779B97F4A7C15ull) >> 32 & (slots - 1);
}

static int32_t place_of(const Places *p, int64_t t) {
    for (uint64_t at = slot_of(t, p->slots);; at = (at + 1) & (p->slots - 1)) {
        if (p->key[at] == t) return p->first[at];
        if (p->key[at] < 0) return -1;
    }
}

/* Each asked term id in ``p``, its places chained in the query's order. */
static void places_fill(Places *p, const Query *q) {
    for (uint64_t i = 0; i < p->slots; i++) p->key[i] = -1;
    for (Py_ssize_t i = q->n_ids - 1; i >= 0; i--) {
        p->then[i] = -1;
        const int64_t t = q->ids[i];
        if (t < 0) continue;
        uint64_t at = slot_of(t, p->slots);
        while (p->key[at] >= 0 && p->key[at] != t) at = (at + 1) & (p->slots - 1);
        if (p->key[at] == t) p->then[i] = p->first[at];
        p->key[at] = t;
        p->first[at] = (int32_t)i;
    }
}

/* ``p`` for query ``q``, allocated and filled: 0, or -1 with MemoryError set. */
static int places_new(Places *p, const Query *q) {
    const size_t ids_n = q->n_ids ? (size_t)q->n_ids : 1;
    p->slots = 16;
    while (p->slots < 2 * ids_n) p->slots *= 2;
    p->key = PyMem_Malloc(sizeof(int64_t) * p->slots);
    p->first = PyMem_Malloc(sizeof(int32_t) * p->slots);
    p->then = PyMem_Malloc(sizeof(int32_t) * ids_n);
    if (!p->key || !p->first || !p->then) {
        PyErr_NoMemory();
        return -1;
    }
    places_fill(p, q);
    return 0;
}

static void places_free(Places *p) {
    PyMem_Free(p->key);
    PyMem_Free(p->first);
    PyMem_Free(p->then);
}

/* The tool index of a row id (rows ascend), -1 for a row the index does not hold. */
static Py_ssize_t doc_of(const Index *self, long long row) {
    Py_ssize_t lo = 0, hi = self->n_docs;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (self->rows[mid] < row) lo = mid + 1;
        else hi = mid;
    }
    return lo < self->n_docs && self->rows[lo] == row ? lo : -1;
}

/* Which query places tool ``doc`` holds (``held``), and with ``contribution``, each one's
   contribution ``(idf * f) / (f + norm)``, with the tool's first count of the term (a term
   repeated in a forged save: its first, as ``_decode``; a count that is not a finite number
   >= 0 counts 0). Without the GIL. */
static void holding(const Index *self, const Places *places, Py_ssize_t doc, char *held,
                    Py_ssize_t n_ids, double *contribution) {
    PyObject *blob = PyList_GET_ITEM(self->blobs, doc);
    Packed p;
    unpack((const unsigned char *)PyBytes_AS_STRING(blob), PyBytes_GET_SIZE(blob),
           self->is_double ? 8 : 4, &p);
    const double norm = self->norms[doc];
    memset(held, 0, (size_t)n_ids);
    for (Py_ssize_t i = 0; i < p.n; i++) {
        const uint32_t t = term_at(&p, i);
        int32_t at = place_of(places, (int64_t)t);
        if (at < 0 || held[at]) continue; /* not asked, or repeated */
        double c = 0.0;
        if (contribution != NULL) {
            double f = count_at(&p, i, self->is_double);
            if (!(f >= 0.0 && f < INFINITY)) f = 0.0;
            c = self->idf[t] * f / (f + norm);
        }
        for (; at >= 0; at = places->then[at]) {
            held[at] = 1;
            if (contribution != NULL) contribution[at] = c;
        }
    }
}

/* One tool's exact bm25() for the query, as ``_score`` (lexical_index.py) computes it: the
   contributions of the query terms it holds (``holding``), added in the query's order (a
   term asked twice, twice), left to right from 0 as ``_score`` and FTS5's bm25() add them:
   the same double, bit for bit. ``contribution`` and ``held`` are scratch of ``n_ids``.
   Without the GIL. */
static double exact_score(const Index *self, const Query *q, const Places *places, Py_ssize_t doc,
                          double *contribution, char *held) {
    holding(self, places, doc, held, q->n_ids, contribution);
    double score = 0.0;
    for (Py_ssize_t i = 0; i < q->n_ids; i++)
        if (held[i]) score += contribution[i];
    return score;
}

/* best(term_ids, k, depth, most, slack, spare_above=-1, mask=None) -> (hits, rounds, scored)

   The k best (row id, exact score), best first (ties: the lower row id first), as
   lexical_index.py's ``rank`` answers: candidates by their bounds, best first, ``depth`` of
   them, each scored exactly until the k-th score beats the next bound times ``1 + slack``
   (every tool after it bounded below it: certified); if not, ``depth`` times 4 (up to
   ``most``) and the new candidates scored. ``rounds``: how many (0: not certified, the best
   of the ``most`` candidates scored); ``scored``: the tools scored exactly.

   ``spare_above`` >= 0: the terms more tools hold than that (all but the rarest one, at
   least) are left out of the bounds: candidates come from the rarer terms alone (most of a
   long query's postings are its commonest terms'), each still scored with every term. The
   bounds then add each spared term's largest impact; a tool holding none of the rarer
   terms is bounded by those alone, so an answer whose k-th score beats both is certified
   still, and one that is not is the best of ``most`` candidates. */
static PyObject *Index_best(Index *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"term_ids", "k", "depth", "most", "slack", "spare_above", "mask",
                             NULL};
    PyObject *ids_obj, *mask_obj = Py_None;
    Py_ssize_t k, depth, most, spare_above = -1;
    double slack;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Onnnd|nO", kwlist, &ids_obj, &k, &depth,
                                     &most, &slack, &spare_above, &mask_obj))
        return NULL;
    const unsigned char *mask = NULL;
    if (mask_of(self, mask_obj, &mask) < 0) return NULL;
    if (!(slack >= 0.0 && slack < 1.0)) {
        PyErr_SetString(PyExc_ValueError, "slack must be in [0, 1)");
        return NULL;
    }
    if (k < 1 || self->n_docs == 0) return Py_BuildValue("(Nii)", PyList_New(0), 1, 0);
    if (k > self->n_docs) k = self->n_docs;
    if (most > self->n_docs) most = self->n_docs;
    if (most < k) most = k;
    if (depth < k) depth = k;
    if (depth > most) depth = most;
    Query q;
    if (query_parse(self, ids_obj, &q) < 0) return NULL;
    const Py_ssize_t n_ids = q.n_ids;
    const size_t ids_n = n_ids ? (size_t)n_ids : 1;
    Places places = {NULL, NULL, NULL, 0};
    Cursor *cursor = PyMem_Malloc(sizeof(Cursor) * ids_n);
    char *skip = PyMem_Calloc(ids_n, 1);
    char *held = PyMem_Malloc(ids_n);
    double *contribution = PyMem_Malloc(sizeof(double) * ids_n);
    Hit *found = PyMem_Malloc(sizeof(Hit) * (size_t)most);
    Scored *best = PyMem_Malloc(sizeof(Scored) * (size_t)k);
    Scratch *s = take_scratch(self);
    PyObject *out = NULL;
    if (!cursor || !skip || !held || !contribution || !found || !best || !s) {
        PyErr_NoMemory();
        goto done;
    }
    if (places_new(&places, &q) < 0) goto done;
    /* Terms spared: held by more than ``spare_above`` tools, the rarest held term kept. */
    uint64_t spared = 0; /* the spared terms' largest impacts, in the query's units */
    int any_spared = 0;
    if (spare_above >= 0) {
        Py_ssize_t rarest = -1;
        uint64_t rarest_df = UINT64_MAX;
        for (Py_ssize_t i = 0; i < n_ids; i++) {
            const int64_t t = q.ids[i];
            if (t < 0) continue;
            const uint64_t df = self->offsets[t + 1] - self->offsets[t];
            if (df > 0 && df < rarest_df) {
                rarest_df = df;
                rarest = i;
            }
        }
        for (Py_ssize_t i = 0; i < n_ids; i++) {
            const int64_t t = q.ids[i];
            /* (no term held: rarest -1, and no term to spare) */
            if (t < 0 || rarest < 0 || i == rarest || q.ids[rarest] == t) continue;
            if (self->offsets[t + 1] - self->offsets[t] > (uint64_t)spare_above) {
                skip[i] = 1;
                any_spared = 1;
                spared += q.cursor[i].times * self->most[t];
            }
        }
    }
    int rounds = 0, certified = 0;
    Py_ssize_t n_best = 0, scored = 0, n_scored = 0; /* scored: of ``found``, this round */
    Py_BEGIN_ALLOW_THREADS
    const double step = 1.0 + slack;
    const double spared_bound = bound_of(&q, spared);
    for (;;) {
        rounds++;
        const Py_ssize_t n_found = gather(self, &q, skip, mask, s, cursor, found, depth);
        /* One order (bound, then tool): a deeper round's first candidates are the round
           before's, scored already. */
        for (Py_ssize_t i = scored; i < n_found; i++) {
            if (n_best == k && best[0].score > bound_of(&q, found[i].sum + spared) * step) {
                certified = 1;
                break;
            }
            const Py_ssize_t doc = (Py_ssize_t)found[i].doc;
            n_scored++;
            const Scored e = {exact_score(self, &q, &places, doc, contribution, held),
                              self->rows[doc]};
            Scored_offer(best, &n_best, k, e);
        }
        scored = n_found;
        /* the tools past these are bounded by the last one's bound */
        if (!certified && n_found > 0 && n_best == k &&
            best[0].score > bound_of(&q, found[n_found - 1].sum + spared) * step)
            certified = 1;
        if (certified) break;
        if (n_found < depth || depth >= self->n_docs) { /* every tool holding one scored */
            /* A tool holding spared terms alone may still belong: among fewer than k, or
               tied at a score of 0 (a spared term's largest impact 0: counts of 0 in a
               forged save), with a lower row id. */
            certified = !any_spared || (n_best == k && best[0].score > spared_bound * step);
            break;
        }
        if (depth >= most) break; /* thousands tied with the k-th: the best effort */
        depth = depth * 4 < most ? depth * 4 : most;
    }
    qsort(best, (size_t)n_best, sizeof(Scored), Scored_best_first);
    Py_END_ALLOW_THREADS
    out = PyList_New(n_best);
    for (Py_ssize_t i = 0; out != NULL && i < n_best; i++) {
        PyObject *item = Py_BuildValue("(Ld)", (long long)best[i].row, best[i].score);
        if (item == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, item);
    }
    if (out != NULL) out = Py_BuildValue("(Nin)", out, certified ? rounds : 0, n_scored);
done:
    if (s) give_scratch(self, s);
    places_free(&places);
    PyMem_Free(cursor);
    PyMem_Free(skip);
    PyMem_Free(held);
    PyMem_Free(contribution);
    PyMem_Free(found);
    PyMem_Free(best);
    query_free(&q);
    return out;
}

/* held(term_ids, rows, labels) -> [set | None]: for each row id, the labels (``labels[i]``
   for ``term_ids[i]``) of the query terms its tool holds, None for a row the index does not
   hold (fusion's signals read which terms each hit holds). */
static PyObject *Index_held(Index *self, PyObject *args) {
    PyObject *ids_obj, *rows_obj, *labels_obj;
    if (!PyArg_ParseTuple(args, "OOO", &ids_obj, &rows_obj, &labels_obj)) return NULL;
    /* Tuples (a list is copied): reading a row id (``__index__``) or hashing a label runs
       Python code, which could empty a list while it is read. */
    PyObject *labels = PySequence_Tuple(labels_obj);
    if (labels == NULL) return NULL;
    PyObject *rows = PySequence_Tuple(rows_obj);
    if (rows == NULL) {
        Py_DECREF(labels);
        return NULL;
    }
    Query q;
    if (query_parse(self, ids_obj, &q) < 0) {
        Py_DECREF(labels);
        Py_DECREF(rows);
        return NULL;
    }
    PyObject *out = NULL;
    const Py_ssize_t n_ids = q.n_ids, n_rows = PyTuple_GET_SIZE(rows);
    Places places = {NULL, NULL, NULL, 0};
    char *held = PyMem_Malloc(n_ids ? (size_t)n_ids : 1);
    if (PyTuple_GET_SIZE(labels) != n_ids) {
        PyErr_SetString(PyExc_ValueError, "a label for each term id");
        goto done;
    }
    if (held == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (places_new(&places, &q) < 0) goto done;
    out = PyList_New(n_rows);
    for (Py_ssize_t r = 0; out != NULL && r < n_rows; r++) {
        int overflow = 0;
        const long long row =
            PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(rows, r), &overflow);
        if (row == -1 && PyErr_Occurred()) {
            Py_CLEAR(out);
            break;
        }
        const Py_ssize_t doc = overflow ? -1 : doc_of(self, row);
        PyObject *item;
        if (doc < 0) {
            item = Py_NewRef(Py_None);
        } else {
            holding(self, &places, doc, held, n_ids, NULL);
            item = PySet_New(NULL);
            for (Py_ssize_t i = 0; item != NULL && i < n_ids; i++)
                if (held[i] && PySet_Add(item, PyTuple_GET_ITEM(labels, i)) < 0)
                    Py_CLEAR(item);
        }
        if (item == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, r, item);
    }
done:
    places_free(&places);
    PyMem_Free(held);
    query_free(&q);
    Py_DECREF(labels);
    Py_DECREF(rows);
    return out;
}

/* mask(rows) -> bytes: the tools of these row ids (rows the index does not hold are passed
   over), for ``top``'s ``mask``. */
static PyObject *Index_mask(Index *self, PyObject *rows_obj) {
    PyObject *it = PyObject_GetIter(rows_obj);
    if (it == NULL) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, mask_bytes(self));
    if (out == NULL) {
        Py_DECREF(it);
        return NULL;
    }
    unsigned char *bits = (unsigned char *)PyBytes_AS_STRING(out);
    memset(bits, 0, (size_t)mask_bytes(self));
    PyObject *item;
    while ((item = PyIter_Next(it)) != NULL) {
        int overflow = 0;
        long long row = PyLong_AsLongLongAndOverflow(item, &overflow);
        Py_DECREF(item);
        if (row == -1 && PyErr_Occurred()) {
            Py_DECREF(it);
            Py_DECREF(out);
            return NULL;
        }
        if (overflow) continue; /* no such row */
        const Py_ssize_t doc = doc_of(self, row);
        if (doc >= 0) bits[(size_t)doc / 8] |= (unsigned char)(1u << (doc % 8));
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *Index_bounded(Index *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->bounded);
}

static PyObject *Index_nbytes(Index *self, void *Py_UNUSED(closure)) {
    size_t bytes = (size_t)self->n_docs * sizeof(int64_t) +
                   ((size_t)self->n_terms + 1) * sizeof(uint64_t) +
                   (size_t)self->gap_offsets[self->n_terms] * sizeof(uint16_t) +
                   ((size_t)self->n_terms + 1) * sizeof(uint64_t) +
                   (size_t)self->n_postings * sizeof(uint16_t) +
                   (size_t)self->n_terms * (2 * sizeof(double) + sizeof(uint16_t)) +
                   (size_t)self->n_docs * (sizeof(double) + sizeof(PyObject *)) +
                   (size_t)self->n_free * sizeof(Scratch);
    return PyLong_FromSize_t(bytes);
}

static PyObject *Index_postings(Index *self, void *Py_UNUSED(closure)) {
    return PyLong_FromUnsignedLongLong(self->n_postings);
}

static PyGetSetDef Index_getset[] = {
    {"bounded", (getter)Index_bounded, NULL, "Every bound holds (False: do not use).", NULL},
    {"nbytes", (getter)Index_nbytes, NULL, "Bytes held (the packed tools shared, not counted).",
     NULL},
    {"postings", (getter)Index_postings, NULL, "(term, tool) pairs held.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Index_methods[] = {
    {"top", (PyCFunction)(void (*)(void))Index_top, METH_VARARGS | METH_KEYWORDS,
     "top(term_ids, n, mask=None): the n largest (bound, row id), largest first."},
    {"best", (PyCFunction)(void (*)(void))Index_best, METH_VARARGS | METH_KEYWORDS,
     "best(term_ids, k, depth, most, slack, spare_above=-1, mask=None): the k best "
     "(row id, exact score), the rounds (0: not certified) and the tools scored."},
    {"held", (PyCFunction)Index_held, METH_VARARGS,
     "held(term_ids, rows, labels): for each row, the labels of the terms it holds."},
    {"mask", (PyCFunction)Index_mask, METH_O,
     "mask(rows): the tools of these row ids, for top's mask."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject IndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "toolcat.search._impacts.Index",
    .tp_basicsize = sizeof(Index),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One revision's postings as quantized BM25 impacts (search/native.py).",
    .tp_new = Index_new,
    .tp_dealloc = (destructor)Index_dealloc,
    .tp_methods = Index_methods,
    .tp_getset = Index_getset,
};


/* A saved index's first pass (lexical_index.py, ``TantivyIndex.build``): each tools_fts row's
   terms counted as ``_weighted`` counts them and packed as ``_pack`` packs them, when the
   column weights are whole multiples of the lightest. The columns are cut where Python's
   ``str.split`` cuts them (the same whitespace); a term's id is its place in first-seen
   order over every row (``term_ids``, a dict for the caller once counting ends), and each
   term's rows are counted (``doc_freq``). The rows are FTS5's copy of the columns, read as
   input: any text is counted as the Python would count it. At 1M tools ~20 us a row in
   Python, ~6 with a dict lookup a token, ~2 with the table below.

   That text is a manifest author's: the table's hash is keyed (from Python's own, per
   process, as a dict's is), else words chosen offline to share a slot would make every
   lookup walk all of them. No Python code runs while a row is counted that could change
   it: its texts are held and its repeats read before the first word, and an ``add`` from
   within one (a key's ``__eq__`` in ``term_ids``) is refused. */
typedef struct {
    PyObject_HEAD
    PyObject *term_ids;  /* term -> id, ids in insertion order */
    Py_ssize_t n_terms;
    Py_ssize_t cap;      /* term ids the per-term arrays hold */
    PyObject **terms;    /* term id -> the term (a reference of our own) */
    uint64_t *hashes;    /* term id -> its hash (of its code points) */
    uint32_t *df;        /* term id -> rows holding it */
    uint32_t *last;      /* term id -> 1 + the row that last held it (0: none yet) */
    uint32_t *slot;      /* term id -> its place in that row's terms */
    /* Open addressing by hash: each slot 1 + a term id (0: empty), at most half used, so a
       term already seen costs no Python object. */
    uint32_t *table;
    uint64_t table_mask; /* slots - 1, a power of two */
    uint64_t key[2];     /* the hash's key (``TermCounts_new``) */
    int busy;            /* a row is being counted */
    uint32_t rows;       /* rows counted */
    uint32_t *ids;       /* the row being counted: its terms, first seen first */
    uint64_t *counts;    /* ... and their weighted counts */
    Py_ssize_t row_cap;
} TermCounts;

static void TermCounts_dealloc(TermCounts *self) {
    Py_XDECREF(self->term_ids);
    for (Py_ssize_t i = 0; i < self->n_terms; i++) Py_DECREF(self->terms[i]);
    free(self->terms);
    free(self->hashes);
    free(self->df);
    free(self->last);
    free(self->slot);
    free(self->table);
    free(self->ids);
    free(self->counts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *TermCounts_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":TermCounts", kwlist)) return NULL;
    TermCounts *self = (TermCounts *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->term_ids = PyDict_New();
    self->table = calloc(1024, sizeof(uint32_t));
    if (self->term_ids == NULL || self->table == NULL) {
        Py_DECREF(self);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    self->table_mask = 1023;
    /* The key: Python's hashes of two constants, keyed per process (PYTHONHASHSEED). */
    const char *names[2] = {"toolcat TermCounts 0", "toolcat TermCounts 1"};
    for (int i = 0; i < 2; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        Py_hash_t hash = name == NULL ? -1 : PyObject_Hash(name);
        Py_XDECREF(name);
        if (hash == -1 && PyErr_Occurred()) {
            Py_DECREF(self);
            return NULL;
        }
        self->key[i] = (uint64_t)hash;
    }
    return (PyObject *)self;
}

static void *grown(void *old, Py_ssize_t cap, size_t item, int *failed) {
    void *new = realloc(old, (size_t)cap * item);
    if (new == NULL) *failed = 1;
    return new == NULL ? old : new;
}

/* Room for one more term id in the per-term arrays, and the table at most half full. */
static int room_for_a_term(TermCounts *self) {
    if (self->n_terms == self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 4096;
        int failed = 0;
        self->terms = grown(self->terms, cap, sizeof(PyObject *), &failed);
        self->hashes = grown(self->hashes, cap, sizeof(uint64_t), &failed);
        self->df = grown(self->df, cap, sizeof(uint32_t), &failed);
        self->last = grown(self->last, cap, sizeof(uint32_t), &failed);
        self->slot = grown(self->slot, cap, sizeof(uint32_t), &failed);
        if (failed) return PyErr_NoMemory(), -1;
        self->cap = cap;
    }
    if ((uint64_t)(self->n_terms + 1) * 2 > self->table_mask + 1) {
        uint64_t mask = self->table_mask * 2 + 1;
        uint32_t *table = calloc(mask + 1, sizeof(uint32_t));
        if (table == NULL) return PyErr_NoMemory(), -1;
        for (Py_ssize_t id = 0; id < self->n_terms; id++) {
            uint64_t at = self->hashes[id] & mask;
            while (table[at]) at = (at + 1) & mask;
            table[at] = (uint32_t)id + 1;
        }
        free(self->table);
        self->table = table;
        self->table_mask = mask;
    }
    return 0;
}

/* Whether ``term`` holds text[start:start + size]'s code points (kinds may differ: a word
   of an emoji's text is stored in its own narrowest kind). */
static int same_term(PyObject *term, int kind, const void *data, Py_ssize_t start,
                     Py_ssize_t size) {
    if (PyUnicode_GET_LENGTH(term) != size) return 0;
    int term_kind = PyUnicode_KIND(term);
    const void *term_data = PyUnicode_DATA(term);
    if (term_kind == kind)
        return memcmp(term_data, (const char *)data + (size_t)start * kind,
                      (size_t)size * kind) == 0;
    for (Py_ssize_t i = 0; i < size; i++)
        if (PyUnicode_READ(term_kind, term_data, i) != PyUnicode_READ(kind, data, start + i))
            return 0;
    return 1;
}

/* The id of ``text[start:end]`` (``hash``: of its code points), a new one (the next in
   order) when first seen; -1 with an exception set on failure. */
static Py_ssize_t term_id(TermCounts *self, PyObject *text, int kind, const void *data,
                          Py_ssize_t start, Py_ssize_t end, uint64_t hash) {
    uint64_t at = hash & self->table_mask;
    for (uint32_t held; (held = self->table[at]) != 0; at = (at + 1) & self->table_mask) {
        Py_ssize_t id = (Py_ssize_t)held - 1;
        if (self->hashes[id] == hash && same_term(self->terms[id], kind, data, start, end - start))
            return id;
    }
    if (self->n_terms >= (Py_ssize_t)UINT32_MAX - 1) {
        PyErr_SetString(PyExc_OverflowError, "more terms than 32-bit ids");
        return -1;
    }
    if (room_for_a_term(self) < 0) return -1;
    PyObject *term = PyUnicode_Substring(text, start, end);
    if (term == NULL) return -1;
    Py_ssize_t id = self->n_terms;
    PyObject *value = PyLong_FromSsize_t(id);
    if (value == NULL || PyDict_SetItem(self->term_ids, term, value) < 0) {
        Py_XDECREF(value);
        Py_DECREF(term);
        return -1;
    }
    Py_DECREF(value);
    self->terms[id] = term;
    self->hashes[id] = hash;
    self->df[id] = 0;
    self->last[id] = 0;
    self->n_terms = id + 1;
    at = hash & self->table_mask; /* the table may have grown */
    while (self->table[at]) at = (at + 1) & self->table_mask;
    self->table[at] = (uint32_t)id + 1;
    return id;
}

static int room_in_row(TermCounts *self, Py_ssize_t need) {
    if (need <= self->row_cap) return 0;
    Py_ssize_t cap = self->row_cap ? self->row_cap * 2 : 256;
    int failed = 0;
    self->ids = grown(self->ids, cap, sizeof(uint32_t), &failed);
    self->counts = grown(self->counts, cap, sizeof(uint64_t), &failed);
    if (failed) return PyErr_NoMemory(), -1;
    self->row_cap = cap;
    return 0;
}

/* Counts one column's words ``repeat`` times each into the row being counted. */
static int count_column(TermCounts *self, PyObject *text, long repeat, uint32_t row,
                        Py_ssize_t *n, uint64_t *length) {
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text), i = 0;
    while (i < size) {
        while (i < size && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i))) i++;
        if (i == size) break;
        Py_ssize_t start = i;
        /* FNV-1a over code points from a keyed start, then murmur3's finalizer keyed: the
           low bits pick the slot, and none can be aimed at without the key */
        uint64_t hash = 1469598103934665603ULL ^ self->key[0];
        for (Py_UCS4 ch; i < size && !Py_UNICODE_ISSPACE(ch = PyUnicode_READ(kind, data, i)); i++)
            hash = (hash ^ ch) * 1099511628211ULL;
        (*length)++;
        if (!repeat) continue;
        hash ^= self->key[1];
        hash ^= hash >> 33;
        hash *= 0xff51afd7ed558ccdULL;
        hash ^= hash >> 33;
        hash *= 0xc4ceb9fe1a85ec53ULL;
        hash ^= hash >> 33;
        Py_ssize_t id = term_id(self, text, kind, data, start, i, hash);
        if (id < 0) return -1;
        if (self->last[id] == row) {
            self->counts[self->slot[id]] += (uint64_t)repeat;
            continue;
        }
        if (room_in_row(self, *n + 1) < 0) return -1;
        self->last[id] = row;
        self->slot[id] = (uint32_t)*n;
        self->ids[*n] = (uint32_t)id;
        self->counts[*n] = (uint64_t)repeat;
        self->df[id]++;
        (*n)++;
    }
    return 0;
}

static PyObject *TermCounts_add(TermCounts *self, PyObject *args) {
    PyObject *texts, *times;
    if (!PyArg_ParseTuple(args, "OO:add", &texts, &times)) return NULL;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "add called while a row is being counted");
        return NULL;
    }
    /* A tuple of our own: the caller's list may change, and its texts be freed, by code a
       repeat's __index__ (below) or a term_ids key's __eq__ (PyDict_SetItem) runs. */
    PyObject *text_seq = PySequence_Tuple(texts);
    if (text_seq == NULL) return NULL;
    PyObject *times_seq = PySequence_Tuple(times);
    if (times_seq == NULL) {
        Py_DECREF(text_seq);
        return NULL;
    }
    PyObject *result = NULL, *packed = NULL;
    Py_ssize_t columns = PyTuple_GET_SIZE(text_seq), n = 0;
    uint64_t length = 0, tokens_in = 0;
    long few[8], *repeats = few; /* most rows have five columns */
    self->busy = 1;
    if (PyTuple_GET_SIZE(times_seq) != columns) {
        PyErr_SetString(PyExc_ValueError, "one repeat a column");
        goto done;
    }
    if (self->rows >= UINT32_MAX - 1) {
        PyErr_SetString(PyExc_OverflowError, "more rows than 32-bit counts");
        goto done;
    }
    /* Every column checked, and every repeat read, before anything is counted: a refused
       row leaves the counts as they were. */
    if (columns > 8 && (repeats = PyMem_Malloc(sizeof(long) * (size_t)columns)) == NULL) {
        repeats = few;
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t c = 0; c < columns; c++) {
        long repeat = PyLong_AsLong(PyTuple_GET_ITEM(times_seq, c));
        if (repeat == -1 && PyErr_Occurred()) goto done;
        if (repeat < 0 || repeat > 65535) {
            PyErr_SetString(PyExc_ValueError, "a column's repeat is 0 to 65535");
            goto done;
        }
        repeats[c] = repeat;
    }
    for (Py_ssize_t c = 0; c < columns; c++) {
        PyObject *text = PyTuple_GET_ITEM(text_seq, c);
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "column %zd is %.50s, not text", c,
                         Py_TYPE(text)->tp_name);
            goto done;
        }
        if (PyUnicode_READY(text) < 0) goto done;
    }
    uint32_t row = ++self->rows;
    for (Py_ssize_t c = 0; c < columns; c++) {
        Py_ssize_t before = (Py_ssize_t)length;
        if (count_column(self, PyTuple_GET_ITEM(text_seq, c), repeats[c], row, &n, &length) < 0)
            goto done;
        tokens_in += (uint64_t)repeats[c] * (length - (uint64_t)before);
    }
    if (length > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a row longer than a 32-bit length");
        goto done;
    }
    packed = PyBytes_FromStringAndSize(NULL, 4 + 8 * n);
    if (packed == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(packed);
    uint32_t length32 = (uint32_t)length;
    memcpy(out, &length32, 4);
    memcpy(out + 4, self->ids, 4 * (size_t)n);
    for (Py_ssize_t j = 0; j < n; j++) {
        if (self->counts[j] > UINT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a term's count past 32 bits");
            goto done;
        }
        uint32_t count = (uint32_t)self->counts[j];
        memcpy(out + 4 + 4 * (size_t)n + 4 * (size_t)j, &count, 4);
    }
    result = Py_BuildValue("OKK", packed, (unsigned long long)length,
                           (unsigned long long)tokens_in);
done:
    self->busy = 0;
    if (repeats != few) PyMem_Free(repeats);
    Py_XDECREF(packed);
    Py_DECREF(text_seq);
    Py_DECREF(times_seq);
    return result;
}

static PyObject *TermCounts_doc_freq(TermCounts *self, PyObject *Py_UNUSED(ignored)) {
    return PyBytes_FromStringAndSize((const char *)self->df,
                                     (Py_ssize_t)sizeof(uint32_t) * self->n_terms);
}

static PyObject *TermCounts_term_ids(TermCounts *self, void *Py_UNUSED(closure)) {
    Py_INCREF(self->term_ids);
    return self->term_ids;
}

static PyGetSetDef TermCounts_getset[] = {
    {"term_ids", (getter)TermCounts_term_ids, NULL,
     "term -> id, in first-seen order (the caller's once counting ends).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef TermCounts_methods[] = {
    {"add", (PyCFunction)TermCounts_add, METH_VARARGS,
     "add(texts, times): one row's (packed terms, length, tantivy's tokens before padding)."},
    {"doc_freq", (PyCFunction)TermCounts_doc_freq, METH_NOARGS,
     "doc_freq(): each term's count of rows holding it, in id order, as uint32 bytes."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TermCountsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "toolcat.search._impacts.TermCounts",
    .tp_basicsize = sizeof(TermCounts),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A saved index's first pass: rows' terms counted and packed (lexical_index.py).",
    .tp_new = TermCounts_new,
    .tp_dealloc = (destructor)TermCounts_dealloc,
    .tp_methods = TermCounts_methods,
    .tp_getset = TermCounts_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_impacts", "BM25 upper bounds, term at a time.", -1, NULL,
};

PyMODINIT_FUNC PyInit__impacts(void) {
    if (PyType_Ready(&IndexType) < 0 || PyType_Ready(&TermCountsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&IndexType);
    if (PyModule_AddObject(m, "Index", (PyObject *)&IndexType) < 0) {
        Py_DECREF(&IndexType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&TermCountsType);
    if (PyModule_AddObject(m, "TermCounts", (PyObject *)&TermCountsType) < 0) {
        Py_DECREF(&TermCountsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
