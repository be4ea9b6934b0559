/* Walks over JSON trees in C: the same answers as their Python (definitions/walks.py
 * ``plain_json``, models.py ``remote_references``, text/documents.py ``schema_texts``,
 * schema_draft7_plain.py ``plainly_valid``), which stays for whatever these decline and
 * for machines without a C compiler.
 *
 * They read exact dicts, lists and strs only, so no one's code runs while they walk: a
 * subclass, or a key that is not an exact str where the Python would compare or convert
 * it, makes ``remote_references`` and ``schema_texts`` answer None (the caller then walks
 * in Python), and ``plain_json`` and ``plainly_valid`` answer False (the caller then runs
 * the full check), as their Python does for anything unusual.
 *
 * Nor do they make an object the garbage collector tracks while they hold borrowed
 * references (lists and sets are made before the walk starts): making one may start a
 * collection, whose finalizers are anyone's code and may free the dict or list being read
 * (attack57: a finalizer that emptied ``properties`` crashed ``schema_texts`` and
 * ``plainly_valid``).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Whether an exact str can be written as UTF-8 (no lone surrogate). */
static int
is_text(PyObject *s)
{
    if (PyUnicode_IS_ASCII(s))
        return 1;
    int kind = PyUnicode_KIND(s);
    if (kind == PyUnicode_1BYTE_KIND)
        return 1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const void *data = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0xD800 && c <= 0xDFFF)
            return 0;
    }
    return 1;
}

/* plain_json: 1, 0, or -1 with an exception (memory only). */
static int
plain(PyObject *value, Py_ssize_t depth, Py_ssize_t max_depth)
{
    PyTypeObject *kind = Py_TYPE(value);
    if (kind == &PyUnicode_Type)
        return is_text(value);
    if (value == Py_None || kind == &PyBool_Type)
        return 1;
    if (kind == &PyLong_Type) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        return overflow == 0; /* a long long is the signed 64-bit range */
    }
    if (kind == &PyFloat_Type)
        return isfinite(PyFloat_AS_DOUBLE(value)) ? 1 : 0;
    if (kind == &PyDict_Type) {
        if (depth >= max_depth)
            return 0;
        Py_ssize_t at = 0;
        PyObject *key, *child;
        while (PyDict_Next(value, &at, &key, &child)) {
            if (Py_TYPE(key) != &PyUnicode_Type || !is_text(key))
                return 0;
            int ok = plain(child, depth + 1, max_depth);
            if (ok <= 0)
                return ok;
        }
        return 1;
    }
    if (kind == &PyList_Type) {
        if (depth >= max_depth)
            return 0;
        /* Nothing runs that could change the list while it is read. */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++) {
            int ok = plain(PyList_GET_ITEM(value, i), depth + 1, max_depth);
            if (ok <= 0)
                return ok;
        }
        return 1;
    }
    return 0;
}

/* The depth bound of a ``(tree, depth)`` call: 0, or -1 with a TypeError or an
 * OverflowError. */
static int
depth_argument(PyObject *const *args, Py_ssize_t nargs, const char *usage, Py_ssize_t *depth)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s takes 2 arguments", usage);
        return -1;
    }
    *depth = PyLong_AsSsize_t(args[1]);
    return *depth == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *
plain_json(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t max_depth;
    if (depth_argument(args, nargs, "plain_json(value, max_depth)", &max_depth) < 0)
        return NULL;
    int ok = plain(args[0], 0, max_depth);
    if (ok < 0)
        return NULL;
    return PyBool_FromLong(ok);
}

static int
is_keyword(PyObject *key, PyObject *keywords)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keywords); i++) {
        PyObject *word = PyTuple_GET_ITEM(keywords, i);
        if (key == word || PyUnicode_Compare(key, word) == 0)
            return 1;
    }
    return 0;
}

static PyObject *
remote_references(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "remote_references(schema, keywords: tuple[str, ...]) takes 2 arguments");
        return NULL;
    }
    PyObject *keywords = args[1];
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keywords); i++) {
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(keywords, i))) {
            PyErr_SetString(PyExc_TypeError, "keywords must be strs");
            return NULL;
        }
    }
    PyObject *found = PyList_New(0);
    PyObject *stack = PyList_New(0);
    if (found == NULL || stack == NULL)
        goto fail;
    if (PyList_Append(stack, args[0]) < 0)
        goto fail;
    for (Py_ssize_t visited = 1; PyList_GET_SIZE(stack) > 0; visited++) {
        /* A tree made in Python may hold a cycle, walked for ever as the Python walks it:
         * Ctrl-C stops both (here nothing is borrowed, so a handler may run). */
        if (visited % 4096 == 0 && PyErr_CheckSignals() < 0)
            goto fail;
        Py_ssize_t last = PyList_GET_SIZE(stack) - 1;
        PyObject *node = PyList_GET_ITEM(stack, last);
        Py_INCREF(node);
        if (PyList_SetSlice(stack, last, last + 1, NULL) < 0) {
            Py_DECREF(node);
            goto fail;
        }
        int declined = 0, failed = 0;
        if (PyDict_CheckExact(node)) {
            Py_ssize_t at = 0;
            PyObject *key, *value;
            while (PyDict_Next(node, &at, &key, &value)) {
                if (!PyUnicode_CheckExact(key)) {
                    declined = 1; /* ``key in REF_KEYWORDS`` would compare it */
                    break;
                }
                if (is_keyword(key, keywords) && PyUnicode_Check(value)) {
                    if (!PyUnicode_CheckExact(value)) {
                        declined = 1;
                        break;
                    }
                    if (PyUnicode_GET_LENGTH(value) == 0 || PyUnicode_READ_CHAR(value, 0) != '#') {
                        if (PyList_Append(found, value) < 0) {
                            failed = 1;
                            break;
                        }
                    }
                }
                else if (PyDict_Check(value) || PyList_Check(value)) {
                    if (PyList_Append(stack, value) < 0) {
                        failed = 1;
                        break;
                    }
                }
            }
        }
        else if (PyList_CheckExact(node)) {
            Py_ssize_t end = PyList_GET_SIZE(stack);
            if (PyList_SetSlice(stack, end, end, node) < 0)
                failed = 1;
        }
        else if (PyDict_Check(node) || PyList_Check(node)) {
            declined = 1;
        }
        Py_DECREF(node);
        if (failed)
            goto fail;
        if (declined) {
            Py_DECREF(found);
            Py_DECREF(stack);
            Py_RETURN_NONE;
        }
    }
    Py_DECREF(stack);
    return found;
fail:
    Py_XDECREF(found);
    Py_XDECREF(stack);
    return NULL;
}

/* The value of an exact dict's key ``name`` (borrowed), NULL when absent; every key read
 * on the way must be an exact str (else *declined). */
static PyObject *
field(PyObject *dict, const char *name, int *declined)
{
    Py_ssize_t at = 0;
    PyObject *key, *value, *found = NULL;
    while (PyDict_Next(dict, &at, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) {
            *declined = 1;
            return NULL;
        }
        if (found == NULL && PyUnicode_CompareWithASCIIString(key, name) == 0)
            found = value;
    }
    return found;
}

/* schema_texts' answer and what making it needs, made before the walk. */
typedef struct {
    PyObject *out;   /* the answer */
    PyObject *words; /* an enum's strs, empty between enums */
    PyObject *space; /* " " */
} Texts;

/* What ``texts`` answers when it declines (the Python walks instead). */
#define DECLINED 1

/* schema_texts into ``made->out``: 0, DECLINED, or -1 with an exception. */
static int
texts(PyObject *schema, Py_ssize_t depth, Py_ssize_t max_depth, Texts *made)
{
    PyObject *out = made->out, *words = made->words;
    if (!PyDict_Check(schema) || depth > max_depth)
        return 0;
    if (!PyDict_CheckExact(schema))
        return DECLINED;
    int declined = 0;
    PyObject *properties = field(schema, "properties", &declined);
    if (declined)
        return DECLINED;
    if (properties != NULL && PyDict_Check(properties)) {
        if (!PyDict_CheckExact(properties))
            return DECLINED;
        Py_ssize_t at = 0;
        PyObject *name, *prop;
        while (PyDict_Next(properties, &at, &name, &prop)) {
            if (!PyUnicode_CheckExact(name))
                return DECLINED; /* ``str(name)`` would run its code */
            if (PyList_Append(out, name) < 0)
                return -1;
            if (!PyDict_Check(prop))
                continue;
            if (!PyDict_CheckExact(prop))
                return DECLINED;
            PyObject *description = field(prop, "description", &declined);
            PyObject *values = declined ? NULL : field(prop, "enum", &declined);
            if (declined)
                return DECLINED;
            if (description != NULL && PyUnicode_Check(description)) {
                if (!PyUnicode_CheckExact(description))
                    return DECLINED;
                if (PyList_Append(out, description) < 0)
                    return -1;
            }
            if (values != NULL && PyList_Check(values)) {
                if (!PyList_CheckExact(values))
                    return DECLINED;
                for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++) {
                    PyObject *v = PyList_GET_ITEM(values, i);
                    if (!PyUnicode_Check(v))
                        continue;
                    if (!PyUnicode_CheckExact(v))
                        return DECLINED;
                    if (PyList_Append(words, v) < 0)
                        return -1;
                }
                PyObject *joined = PyUnicode_Join(made->space, words);
                if (PyList_SetSlice(words, 0, PyList_GET_SIZE(words), NULL) < 0 ||
                    joined == NULL) {
                    Py_XDECREF(joined);
                    return -1;
                }
                int appended = PyList_Append(out, joined);
                Py_DECREF(joined);
                if (appended < 0)
                    return -1;
            }
            int done = texts(prop, depth + 1, max_depth, made);
            if (done != 0)
                return done;
        }
    }
    PyObject *items = field(schema, "items", &declined);
    if (declined)
        return DECLINED;
    if (items != NULL && PyDict_Check(items))
        return texts(items, depth + 1, max_depth, made);
    return 0;
}

static PyObject *
schema_texts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t max_depth;
    if (depth_argument(args, nargs, "schema_texts(schema, max_depth)", &max_depth) < 0)
        return NULL;
    Texts made = {PyList_New(0), PyList_New(0), PyUnicode_FromString(" ")};
    int done = -1;
    if (made.out != NULL && made.words != NULL && made.space != NULL)
        done = texts(args[0], 0, max_depth, &made);
    Py_XDECREF(made.words);
    Py_XDECREF(made.space);
    if (done == 0)
        return made.out;
    Py_XDECREF(made.out);
    if (done == DECLINED)
        Py_RETURN_NONE;
    return NULL;
}

/* schema_draft7_plain.plainly_valid: 1 when draft-07's meta-schema surely accepts the
 * schema, 0 when it may not (anything unusual: the caller runs the meta-schema), -1 with
 * an exception (memory only). The keyword sets are the Python's, in the same order of
 * tests; a key that is not an exact str answers 0 (the Python would hash and compare it). */
static const char *const TEXT_KEYS[] = {
    "title", "description", "$comment", "format", "contentMediaType", "contentEncoding", NULL};
static const char *const SIMPLE_TYPES[] = {
    "array", "boolean", "integer", "null", "number", "object", "string", NULL};
static const char *const ANY_KEYS[] = {"default", "const", NULL};
static const char *const NUMBER_KEYS[] = {
    "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", NULL};
static const char *const COUNT_KEYS[] = {
    "maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties", NULL};
static const char *const FLAG_KEYS[] = {"uniqueItems", "readOnly", NULL};
static const char *const SCHEMA_KEYS[] = {
    "items", "additionalProperties", "not", "contains", "propertyNames", NULL};
static const char *const SCHEMA_MAP_KEYS[] = {"properties", "definitions", NULL};
static const char *const SCHEMA_LIST_KEYS[] = {"allOf", "anyOf", "oneOf", NULL};
static const char *const DEFERRED_KEYS[] = {
    "$id", "$schema", "$ref", "pattern", "patternProperties", "additionalItems",
    "dependencies", "multipleOf", "if", "then", "else", NULL};

static int
one_of(PyObject *text, const char *const *names)
{
    for (; *names != NULL; names++) {
        if (PyUnicode_CompareWithASCIIString(text, *names) == 0)
            return 1;
    }
    return 0;
}

/* A non-empty list of distinct exact strs, each in ``names`` when given; ``seen`` is an
 * empty set, made before the walk, and left empty. */
static int
distinct_texts(PyObject *value, const char *const *names, int non_empty, PyObject *seen)
{
    if (!PyList_CheckExact(value))
        return 0;
    Py_ssize_t n = PyList_GET_SIZE(value);
    if (non_empty && n == 0)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(value, i);
        if (!PyUnicode_CheckExact(v) || (names != NULL && !one_of(v, names)))
            return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* exact strs: hashing runs no one's code */
        if (PySet_Add(seen, PyList_GET_ITEM(value, i)) < 0) {
            PySet_Clear(seen);
            return -1;
        }
    }
    int distinct = PySet_GET_SIZE(seen) == n;
    PySet_Clear(seen);
    return distinct;
}

/* An exact int's sign, without the private API. */
static int
not_negative(PyObject *value)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    return overflow > 0 || (overflow == 0 && v >= 0);
}

static int
valid(PyObject *schema, Py_ssize_t depth, Py_ssize_t max_nesting, PyObject *seen)
{
    if (Py_TYPE(schema) == &PyBool_Type)
        return 1;
    if (!PyDict_CheckExact(schema) || depth > max_nesting)
        return 0;
    Py_ssize_t at = 0;
    PyObject *key, *value;
    while (PyDict_Next(schema, &at, &key, &value)) {
        if (!PyUnicode_CheckExact(key))
            return 0;
        PyTypeObject *kind = Py_TYPE(value);
        int ok = 1;
        if (one_of(key, TEXT_KEYS)) {
            ok = kind == &PyUnicode_Type;
        }
        else if (PyUnicode_CompareWithASCIIString(key, "type") == 0) {
            ok = kind == &PyUnicode_Type ? one_of(value, SIMPLE_TYPES)
                                         : distinct_texts(value, SIMPLE_TYPES, 1, seen);
        }
        else if (one_of(key, SCHEMA_MAP_KEYS)) {
            if (kind != &PyDict_Type)
                return 0;
            Py_ssize_t inner = 0;
            PyObject *name, *child;
            while (ok > 0 && PyDict_Next(value, &inner, &name, &child))
                ok = valid(child, depth + 1, max_nesting, seen);
        }
        else if (PyUnicode_CompareWithASCIIString(key, "required") == 0) {
            ok = distinct_texts(value, NULL, 0, seen);
        }
        else if (one_of(key, SCHEMA_KEYS)) {
            ok = valid(value, depth + 1, max_nesting, seen);
        }
        else if (PyUnicode_CompareWithASCIIString(key, "enum") == 0 ||
                 PyUnicode_CompareWithASCIIString(key, "examples") == 0) {
            ok = kind == &PyList_Type;
        }
        else if (one_of(key, ANY_KEYS)) {
            continue;
        }
        else if (one_of(key, NUMBER_KEYS)) {
            ok = kind == &PyLong_Type || kind == &PyFloat_Type;
        }
        else if (one_of(key, COUNT_KEYS)) {
            ok = kind == &PyLong_Type && not_negative(value);
        }
        else if (one_of(key, FLAG_KEYS)) {
            ok = kind == &PyBool_Type;
        }
        else if (one_of(key, SCHEMA_LIST_KEYS)) {
            if (kind != &PyList_Type || PyList_GET_SIZE(value) == 0)
                return 0;
            for (Py_ssize_t i = 0; ok > 0 && i < PyList_GET_SIZE(value); i++)
                ok = valid(PyList_GET_ITEM(value, i), depth + 1, max_nesting, seen);
        }
        else if (one_of(key, DEFERRED_KEYS)) {
            return 0;
        }
        /* any other key is a keyword draft-07 does not know: the meta-schema leaves it */
        if (ok <= 0)
            return ok;
    }
    return 1;
}

static PyObject *
plainly_valid(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t max_nesting;
    if (depth_argument(args, nargs, "plainly_valid(schema, max_nesting)", &max_nesting) < 0)
        return NULL;
    PyObject *seen = PySet_New(NULL);
    if (seen == NULL)
        return NULL;
    int ok = valid(args[0], 0, max_nesting, seen);
    Py_DECREF(seen);
    if (ok < 0)
        return NULL;
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"plainly_valid", (PyCFunction)(void (*)(void))plainly_valid, METH_FASTCALL,
     "plainly_valid(schema, max_nesting) -> bool: schema_draft7_plain.plainly_valid"},
    {"plain_json", (PyCFunction)(void (*)(void))plain_json, METH_FASTCALL,
     "plain_json(value, max_depth) -> bool: registry.limits.plain_json"},
    {"remote_references", (PyCFunction)(void (*)(void))remote_references, METH_FASTCALL,
     "remote_references(schema, keywords) -> list[str] | None: models.remote_references "
     "(None: declined)"},
    {"schema_texts", (PyCFunction)(void (*)(void))schema_texts, METH_FASTCALL,
     "schema_texts(schema, max_depth) -> list[str] | None: text.documents.schema_texts "
     "(None: declined)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_walks", "Walks over JSON trees in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__walks(void)
{
    return PyModule_Create(&module_def);
}
