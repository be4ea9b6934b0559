/* Words and index terms of ASCII text in C (text/tokenize.py): the same lists as the
 * Python, which stays for other text and for machines without a C compiler.
 *
 * A word is what the identifier pattern ``_CAMEL`` finds, lowercased:
 *     [A-Z]+(?=[A-Z][a-z]) | [A-Z]?[a-z]+ | [A-Z]+ | [0-9]+
 * found left to right, anything else skipped. ``terms`` then keeps each word's stem from
 * the stems dict, drops stop words and over-long words, and asks ``stem`` (Python) for a
 * word it has not seen, as ``_terms`` does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define UPPER(c) ((c) >= 'A' && (c) <= 'Z')
#define LOWER(c) ((c) >= 'a' && (c) <= 'z')
#define DIGIT(c) ((c) >= '0' && (c) <= '9')

/* The next word of s[*at..n) as [start, end), or 0 when there is none. */
static int
next_word(const Py_UCS1 *s, Py_ssize_t n, Py_ssize_t *at, Py_ssize_t *start, Py_ssize_t *end)
{
    Py_ssize_t i = *at;
    while (i < n) {
        Py_UCS1 c = s[i];
        Py_ssize_t j = i + 1;
        if (UPPER(c)) {
            while (j < n && UPPER(s[j]))
                j++;
            if (j - i >= 2 && j < n && LOWER(s[j])) {
                j--; /* an acronym before a capitalised word: all but its last letter */
            }
            else if (j - i == 1 && j < n && LOWER(s[j])) {
                while (j < n && LOWER(s[j]))
                    j++; /* a capitalised word */
            }
        }
        else if (LOWER(c)) {
            while (j < n && LOWER(s[j]))
                j++;
        }
        else if (DIGIT(c)) {
            while (j < n && DIGIT(s[j]))
                j++;
        }
        else {
            i++;
            continue;
        }
        *start = i;
        *end = j;
        *at = j;
        return 1;
    }
    *at = n;
    return 0;
}

static PyObject *
lowered(const Py_UCS1 *s, Py_ssize_t start, Py_ssize_t end)
{
    PyObject *word = PyUnicode_New(end - start, 127);
    if (word == NULL)
        return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(word);
    for (Py_ssize_t k = start; k < end; k++) {
        Py_UCS1 c = s[k];
        out[k - start] = UPPER(c) ? (Py_UCS1)(c + 32) : c;
    }
    return word;
}

/* The text's ASCII bytes, or NULL when it is not an exact ASCII str (the caller then
 * answers None: the Python handles it). */
static const Py_UCS1 *
ascii_of(PyObject *text, Py_ssize_t *n)
{
    if (!PyUnicode_CheckExact(text) || !PyUnicode_IS_ASCII(text))
        return NULL;
    *n = PyUnicode_GET_LENGTH(text);
    return PyUnicode_1BYTE_DATA(text);
}

/* The words of an ASCII str (``stems`` NULL), or its index terms: each word's kept stem,
 * stop words and over-long words dropped, ``stem`` asked for a word not kept. None when
 * the text is not an exact ASCII str. */
static PyObject *
split(PyObject *text, PyObject *stems, PyObject *stop_words, Py_ssize_t max_length,
      PyObject *stem)
{
    Py_ssize_t n, at = 0, start, end;
    const Py_UCS1 *s = ascii_of(text, &n);
    if (s == NULL)
        Py_RETURN_NONE;
    /* The text and the stems stay alive while ``stem`` runs: the caller's arguments hold
     * them, and a str never changes. */
    PyObject *found = PyList_New(0);
    if (found == NULL)
        return NULL;
    while (next_word(s, n, &at, &start, &end)) {
        PyObject *word = lowered(s, start, end);
        if (word == NULL)
            goto fail;
        if (stems == NULL) {
            int appended = PyList_Append(found, word);
            Py_DECREF(word);
            if (appended < 0)
                goto fail;
            continue;
        }
        PyObject *kept = PyDict_GetItemWithError(stems, word); /* borrowed */
        if (kept != NULL) {
            Py_DECREF(word);
            if (PyList_Append(found, kept) < 0)
                goto fail;
            continue;
        }
        if (PyErr_Occurred()) {
            Py_DECREF(word);
            goto fail;
        }
        int stop = end - start > max_length ? 1 : PySet_Contains(stop_words, word);
        if (stop) {
            Py_DECREF(word);
            if (stop < 0)
                goto fail;
            continue;
        }
        PyObject *stemmed = PyObject_CallOneArg(stem, word);
        Py_DECREF(word);
        if (stemmed == NULL)
            goto fail;
        int appended = PyList_Append(found, stemmed);
        Py_DECREF(stemmed);
        if (appended < 0)
            goto fail;
    }
    return found;
fail:
    Py_DECREF(found);
    return NULL;
}

static PyObject *
words(PyObject *module, PyObject *text)
{
    return split(text, NULL, NULL, 0, NULL);
}

static PyObject *
terms(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "terms(text, stems, stop_words, max_length, stem) takes 5 arguments");
        return NULL;
    }
    if (!PyDict_CheckExact(args[1]) || !PyFrozenSet_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "stems must be a dict and stop_words a frozenset");
        return NULL;
    }
    Py_ssize_t max_length = PyLong_AsSsize_t(args[3]);
    if (max_length == -1 && PyErr_Occurred())
        return NULL;
    return split(args[0], args[1], args[2], max_length, args[4]);
}

static PyMethodDef methods[] = {
    {"words", (PyCFunction)words, METH_O,
     "words(text) -> list[str] | None: the lowercased words of an ASCII str (None: not one)"},
    {"terms", (PyCFunction)(void (*)(void))terms, METH_FASTCALL,
     "terms(text, stems, stop_words, max_length, stem) -> list[str] | None: the index terms "
     "of an ASCII str (None: not one)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_words", "Words and index terms of ASCII text in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__words(void)
{
    return PyModule_Create(&module_def);
}
