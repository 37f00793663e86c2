/* codec._accel: one generic interpreter that decodes Kafka structs in C.
 *
 * codec/accel.py lowers a message version into a program of nested tuples; make_decoder
 * turns it into the C tree below (validating every part of it) and returns a callable
 * with the Python decoders' signature: f(buf, pos, end, budget) -> (dict, pos). The
 * Python decoders (codec/compiler.py) are the reference; this file mirrors them check
 * for check, so the same input gives the same dict, position, budget and DecodeError
 * (class, offset and message).
 *
 * Memory safety: every read of the buffer (r->b) follows a check in the same function
 * that it ends at or before `end` (read_fixed_elements: its caller's count check), and
 * takes() checks 0 <= pos <= end <= the buffer's length, on an export that keeps the
 * buffer from being released or resized during the call. Lengths and counts are int64
 * (a varint here carries up to 35 bits) and are compared with the bytes left, never
 * added to a position before that. Every function returns NULL or -1 with an exception
 * set, and its caller drops what it built so far.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* CPython 3.11 only (the layout verified, see put_direct): a decoded struct's values
 * go straight into its dict's entries. The internal header needs Py_BUILD_CORE, which
 * is set only around it: the rest of this file sees the public API alone. Where the
 * header is not installed, the public API does it all (rather than the build failing,
 * which setup.py's optional=True would turn into no extension at all). */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && !defined(Py_LIMITED_API) \
    && !defined(PYPY_VERSION) && defined(__has_include)
#if __has_include("internal/pycore_dict.h")
#define DIRECT_DICT 1
#define Py_BUILD_CORE
#include "internal/pycore_dict.h"
#undef Py_BUILD_CORE
#endif
#endif
#ifndef DIRECT_DICT
#define DIRECT_DICT 0
#endif

/* Error paths and rare fields out of line: the hot functions stay small. */
#if defined(__GNUC__)
#define COLD __attribute__((cold, noinline))
#define NOINLINE __attribute__((noinline))
#else
#define COLD
#define NOINLINE
#endif

/* Op kinds: codec/accel.py has the same numbers. */
enum { OP_FIXED = 1, OP_STRING, OP_BYTES, OP_RECORDS, OP_UUID, OP_STRUCT, OP_ARRAY };

#define MAX_DEPTH 32              /* struct nesting: Kafka's schemas go 5 deep */
#define MAX_FIELDS 64             /* fields of one struct: Kafka's largest has 16 */
#define MAX_MIN_SIZE (1 << 20)    /* keeps count * element size far from overflow */
#define MAX_TAG ((int64_t)1 << 35) /* a 5-byte varint carries 35 bits */

typedef struct Program Program;
typedef struct Op Op;

typedef struct {
    Py_ssize_t slot;  /* the struct field it decodes; -1 for an array element */
    char code;        /* struct format character: b h H i I q d ? */
    int size;
} FixedField;

struct Op {
    int kind;
    Py_ssize_t slot;      /* the struct field it decodes; -1 for an array element */
    int flex;             /* compact (varint) length or count */
    int nullable;
    int peek;             /* the bounds check covers one byte more: a varint follows */
    Py_ssize_t nfixed;    /* OP_FIXED: the run */
    FixedField *fixed;
    Py_ssize_t run_size;
    int64_t min_size;     /* OP_ARRAY: fewest bytes one element takes */
    Op *element;          /* OP_ARRAY */
    Program *sub;         /* OP_STRUCT */
};

typedef struct {
    int64_t tag;
    Py_ssize_t slot;
    PyObject *deflt;      /* compared with the value: equal goes to _explicit_tags */
    Op op;
} Tagged;

typedef struct {
    Py_ssize_t slot;
    PyObject *deflt;      /* a list or dict, copied per decode */
    int shallow;          /* it holds no list or dict: a shallow copy will do */
} Fresh;

struct Program {
    int flexible;
    Py_ssize_t nkeys;
    PyObject **keys;      /* the dict's keys, in order */
    PyObject **values;    /* the template's value of each key: see put() */
    PyObject *template_;  /* keys -> values: each struct's dict starts as a copy */
    int direct;           /* a copy's entry i holds keys[i]: see put_direct */
    Py_ssize_t nops;
    Op *ops;
    Py_ssize_t ntagged;
    Tagged *tagged;       /* sorted by tag */
    Py_ssize_t nfresh;
    Fresh *fresh;
};

/* What the Python side provides: codec.wire's error factories and uuid cache. */
typedef struct {
    PyObject *short_;          /* wire.short(pos, what) -> DecodeError */
    PyObject *invalid;         /* wire.invalid(pos, what) -> DecodeError */
    PyObject *uuid_of;         /* wire.uuid_of(bytes) -> UUID */
    Py_ssize_t max_unknown_tags;
    PyObject *unknown_key;     /* "_unknown_tags" */
    PyObject *explicit_key;    /* "_explicit_tags" */
} Helpers;

/* ------------------------------------------------------------------------------------
 * The program: loading (validated) and freeing
 * ------------------------------------------------------------------------------------ */

static void free_program(Program *prog);

static void clear_op(Op *op)
{
    PyMem_Free(op->fixed);
    op->fixed = NULL;
    if (op->element != NULL) {
        clear_op(op->element);
        PyMem_Free(op->element);
        op->element = NULL;
    }
    free_program(op->sub);
    op->sub = NULL;
}

static void free_program(Program *prog)
{
    Py_ssize_t i;
    if (prog == NULL)
        return;
    for (i = 0; prog->keys != NULL && i < prog->nkeys; i++) {
        Py_XDECREF(prog->keys[i]);
        Py_XDECREF(prog->values[i]);
    }
    PyMem_Free(prog->keys);
    PyMem_Free(prog->values);
    Py_XDECREF(prog->template_);
    for (i = 0; prog->ops != NULL && i < prog->nops; i++)
        clear_op(&prog->ops[i]);
    PyMem_Free(prog->ops);
    for (i = 0; prog->tagged != NULL && i < prog->ntagged; i++) {
        Py_XDECREF(prog->tagged[i].deflt);
        clear_op(&prog->tagged[i].op);
    }
    PyMem_Free(prog->tagged);
    for (i = 0; prog->fresh != NULL && i < prog->nfresh; i++)
        Py_XDECREF(prog->fresh[i].deflt);
    PyMem_Free(prog->fresh);
    PyMem_Free(prog);
}

static int bad_program(const char *what)
{
    PyErr_Format(PyExc_ValueError, "invalid decoder program: %s", what);
    return -1;
}

/* A tuple of exactly n items (any number if n < 0). */
static PyObject *tuple_of(PyObject *obj, Py_ssize_t n, const char *what)
{
    if (!PyTuple_Check(obj) || (n >= 0 && PyTuple_GET_SIZE(obj) != n)) {
        bad_program(what);
        return NULL;
    }
    return obj;
}

/* A 0/1 flag (Python bool or int). */
static int load_flag(PyObject *obj, int *out)
{
    long value = PyLong_Check(obj) ? PyLong_AsLong(obj) : -1;
    if (value != 0 && value != 1) {
        PyErr_Clear();
        return bad_program("flag");
    }
    *out = (int)value;
    return 0;
}

static void *calloc_or_raise(Py_ssize_t n, size_t size)
{
    void *memory = PyMem_Calloc((size_t)n, size);
    if (memory == NULL)
        PyErr_NoMemory();
    return memory;
}

/* The slot of a field's key (`index` maps keys to slots), or -1 for an array element,
 * whose key must be None. */
static int load_slot(PyObject *index, PyObject *key, int element, Py_ssize_t *slot)
{
    PyObject *found;
    if (element) {
        *slot = -1;
        return key == Py_None ? 0 : bad_program("an element has no key");
    }
    found = PyUnicode_CheckExact(key) ? PyDict_GetItemWithError(index, key) : NULL;
    if (found == NULL)
        return PyErr_Occurred() ? -1 : bad_program("field of no key");
    *slot = PyLong_AsSsize_t(found);
    return 0;
}

static int fixed_size(char code)
{
    switch (code) {
    case 'b': case '?': return 1;
    case 'h': case 'H': return 2;
    case 'i': case 'I': return 4;
    case 'q': case 'd': return 8;
    default: return 0;
    }
}

static Program *load_program(PyObject *obj, int depth);
static int load_op(PyObject *t, PyObject *index, int element, int depth, Op *op);

static int load_fixed(PyObject *t, PyObject *index, int element, Op *op)
{
    PyObject *pairs;
    Py_ssize_t i, n;
    if (tuple_of(t, 3, "fixed op") == NULL || load_flag(PyTuple_GET_ITEM(t, 1), &op->peek) < 0)
        return -1;
    pairs = PyTuple_GET_ITEM(t, 2);
    if (tuple_of(pairs, -1, "fixed run") == NULL)
        return -1;
    n = PyTuple_GET_SIZE(pairs);
    if (n < 1 || (element && (n != 1 || op->peek)))
        return bad_program("fixed run size");
    if ((op->fixed = calloc_or_raise(n, sizeof(FixedField))) == NULL)
        return -1;
    op->nfixed = n;
    for (i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, i), *code;
        FixedField *f = &op->fixed[i];
        if (tuple_of(pair, 2, "fixed field") == NULL)
            return -1;
        code = PyTuple_GET_ITEM(pair, 1);
        if (!PyUnicode_CheckExact(code) || PyUnicode_GET_LENGTH(code) != 1
            || PyUnicode_READ_CHAR(code, 0) > 127)
            return bad_program("fixed code");
        f->code = (char)PyUnicode_READ_CHAR(code, 0);
        f->size = fixed_size(f->code);
        if (f->size == 0)
            return bad_program("fixed code");
        if (load_slot(index, PyTuple_GET_ITEM(pair, 0), element, &f->slot) < 0)
            return -1;
        op->run_size += f->size;
    }
    return 0;
}

static int load_array(PyObject *t, PyObject *index, int depth, Op *op)
{
    PyObject *size;
    if (tuple_of(t, 7, "array op") == NULL || load_slot(index, PyTuple_GET_ITEM(t, 1), 0, &op->slot) < 0
        || load_flag(PyTuple_GET_ITEM(t, 2), &op->flex) < 0
        || load_flag(PyTuple_GET_ITEM(t, 3), &op->nullable) < 0
        || load_flag(PyTuple_GET_ITEM(t, 4), &op->peek) < 0)
        return -1;
    size = PyTuple_GET_ITEM(t, 5);
    op->min_size = PyLong_Check(size) ? PyLong_AsLongLong(size) : -1;
    if (op->min_size < 1 || op->min_size > MAX_MIN_SIZE) {
        PyErr_Clear();
        return bad_program("element size");
    }
    if ((op->element = calloc_or_raise(1, sizeof(Op))) == NULL)
        return -1;
    if (load_op(PyTuple_GET_ITEM(t, 6), NULL, 1, depth, op->element) < 0)
        return -1;
    if (op->element->kind == OP_FIXED && op->element->run_size != op->min_size)
        return bad_program("fixed element size");
    if (op->peek && op->element->kind != OP_FIXED)
        return bad_program("peek after an array of variable elements");
    return 0;
}

/* Load one op; `element`: an array's element (no key, no peek, not nullable). */
static int load_op(PyObject *t, PyObject *index, int element, int depth, Op *op)
{
    long kind;
    memset(op, 0, sizeof(*op));
    if (tuple_of(t, -1, "op") == NULL || PyTuple_GET_SIZE(t) < 2)
        return bad_program("op");
    kind = PyLong_Check(PyTuple_GET_ITEM(t, 0)) ? PyLong_AsLong(PyTuple_GET_ITEM(t, 0)) : -1;
    if (kind == -1 && PyErr_Occurred())
        PyErr_Clear();
    op->kind = (int)kind;
    switch (kind) {
    case OP_FIXED:
        return load_fixed(t, index, element, op);
    case OP_STRING: case OP_BYTES: case OP_RECORDS:
        if (tuple_of(t, 5, "sized op") == NULL
            || load_slot(index, PyTuple_GET_ITEM(t, 1), element, &op->slot) < 0
            || load_flag(PyTuple_GET_ITEM(t, 2), &op->flex) < 0
            || load_flag(PyTuple_GET_ITEM(t, 3), &op->nullable) < 0
            || load_flag(PyTuple_GET_ITEM(t, 4), &op->peek) < 0)
            return -1;
        return element && (op->nullable || op->peek) ? bad_program("element flags") : 0;
    case OP_UUID:
        if (tuple_of(t, 2, "uuid op") == NULL)
            return -1;
        return load_slot(index, PyTuple_GET_ITEM(t, 1), element, &op->slot);
    case OP_STRUCT:
        if (tuple_of(t, 4, "struct op") == NULL
            || load_slot(index, PyTuple_GET_ITEM(t, 1), element, &op->slot) < 0
            || load_flag(PyTuple_GET_ITEM(t, 2), &op->nullable) < 0)
            return -1;
        if (element && op->nullable)
            return bad_program("element flags");
        op->sub = load_program(PyTuple_GET_ITEM(t, 3), depth + 1);
        return op->sub == NULL ? -1 : 0;
    case OP_ARRAY:
        return element ? bad_program("array of arrays") : load_array(t, index, depth, op);
    default:
        return bad_program("op kind");
    }
}

#if DIRECT_DICT
/* Whether a copy of the template is what build_dict's direct writes expect: its own
 * combined table of str keys (so no other dict sees the writes), entry i holding
 * keys[i] and values[i]. The template never changes, so neither do its copies. */
static int direct_layout(const Program *prog)
{
    PyDictObject *copy = (PyDictObject *)PyDict_Copy(prog->template_);
    PyDictKeysObject *dk;
    Py_ssize_t i;
    int ok;
    if (copy == NULL)
        return -1;
    dk = copy->ma_keys;
    ok = PyDict_CheckExact(copy) && copy->ma_values == NULL && dk->dk_kind == DICT_KEYS_UNICODE
         && dk != ((PyDictObject *)prog->template_)->ma_keys && dk->dk_refcnt == 1
         && dk->dk_nentries == prog->nkeys && copy->ma_used == prog->nkeys && prog->nkeys > 0;
    for (i = 0; ok && i < prog->nkeys; i++)
        ok = DK_UNICODE_ENTRIES(dk)[i].me_key == prog->keys[i]
             && DK_UNICODE_ENTRIES(dk)[i].me_value == prog->values[i];
    Py_DECREF(copy);
    return ok;
}
#endif

/* The keys in order, their template values, and `index`: key -> slot. */
static int load_template(Program *prog, PyObject *items, PyObject *index)
{
    Py_ssize_t i, n;
    if (tuple_of(items, -1, "template") == NULL)
        return -1;
    n = PyTuple_GET_SIZE(items);
    if (n > MAX_FIELDS)
        return bad_program("too many fields");
    if ((prog->template_ = PyDict_New()) == NULL || (prog->keys = calloc_or_raise(n + 1, sizeof(PyObject *))) == NULL
        || (prog->values = calloc_or_raise(n + 1, sizeof(PyObject *))) == NULL)
        return -1;
    prog->nkeys = n;
    for (i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(items, i), *slot;
        int status;
        if (tuple_of(pair, 2, "template item") == NULL)
            return -1;
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0)))
            return bad_program("template key");
        prog->keys[i] = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
        prog->values[i] = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
        if (PyDict_SetItem(prog->template_, prog->keys[i], prog->values[i]) < 0 || (slot = PyLong_FromSsize_t(i)) == NULL)
            return -1;
        status = PyDict_SetItem(index, prog->keys[i], slot);
        Py_DECREF(slot);
        if (status < 0)
            return -1;
    }
    if (PyDict_GET_SIZE(index) != n)
        return bad_program("duplicate template key");
#if DIRECT_DICT
    if ((prog->direct = direct_layout(prog)) < 0)
        return -1;
#endif
    return 0;
}

/* Whether a list's or dict's items are all neither lists nor dicts. */
static int holds_no_container(PyObject *obj)
{
    PyObject *key, *value;
    Py_ssize_t i = 0;
    if (PyList_CheckExact(obj)) {
        for (i = 0; i < PyList_GET_SIZE(obj); i++)
            if (PyList_Check(PyList_GET_ITEM(obj, i)) || PyDict_Check(PyList_GET_ITEM(obj, i)))
                return 0;
        return 1;
    }
    while (PyDict_Next(obj, &i, &key, &value))
        if (PyList_Check(value) || PyDict_Check(value))
            return 0;
    return 1;
}

static int load_fresh(Program *prog, PyObject *items, PyObject *index)
{
    Py_ssize_t i, n;
    if (tuple_of(items, -1, "fresh defaults") == NULL)
        return -1;
    n = PyTuple_GET_SIZE(items);
    if (n == 0)
        return 0;
    if ((prog->fresh = calloc_or_raise(n, sizeof(Fresh))) == NULL)
        return -1;
    prog->nfresh = n;
    for (i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(items, i), *value;
        if (tuple_of(pair, 2, "fresh default") == NULL)
            return -1;
        value = PyTuple_GET_ITEM(pair, 1);
        if (!PyDict_CheckExact(value) && !PyList_CheckExact(value))
            return bad_program("fresh default type");
        if (load_slot(index, PyTuple_GET_ITEM(pair, 0), 0, &prog->fresh[i].slot) < 0)
            return -1;
        prog->fresh[i].deflt = Py_NewRef(value);
        prog->fresh[i].shallow = holds_no_container(value);
    }
    return 0;
}

static int load_tagged(Program *prog, PyObject *items, PyObject *index, int depth)
{
    Py_ssize_t i, n;
    if (tuple_of(items, -1, "tagged fields") == NULL)
        return -1;
    n = PyTuple_GET_SIZE(items);
    if (n > 0 && !prog->flexible)
        return bad_program("tagged fields in a struct that is not flexible");
    if (n == 0)
        return 0;
    if ((prog->tagged = calloc_or_raise(n, sizeof(Tagged))) == NULL)
        return -1;
    prog->ntagged = n;
    for (i = 0; i < n; i++) {
        PyObject *entry = PyTuple_GET_ITEM(items, i), *tag;
        Tagged *t = &prog->tagged[i];
        Py_ssize_t op_slot;
        if (tuple_of(entry, 4, "tagged field") == NULL)
            return -1;
        tag = PyTuple_GET_ITEM(entry, 0);
        t->tag = PyLong_Check(tag) ? PyLong_AsLongLong(tag) : -1;
        if (t->tag < 0 || t->tag >= MAX_TAG || (i > 0 && t->tag < prog->tagged[i - 1].tag)) {
            PyErr_Clear();
            return bad_program("tag");
        }
        t->deflt = Py_NewRef(PyTuple_GET_ITEM(entry, 3));
        if (load_slot(index, PyTuple_GET_ITEM(entry, 1), 0, &t->slot) < 0
            || load_op(PyTuple_GET_ITEM(entry, 2), index, 0, depth, &t->op) < 0)
            return -1;
        op_slot = t->op.kind == OP_FIXED ? (t->op.nfixed == 1 ? t->op.fixed[0].slot : -1) : t->op.slot;
        if (t->op.peek || op_slot != t->slot)
            return bad_program("tagged op");
    }
    return 0;
}

static int load_ops(Program *prog, PyObject *items, PyObject *index, int depth)
{
    Py_ssize_t i, n;
    if (tuple_of(items, -1, "ops") == NULL)
        return -1;
    n = PyTuple_GET_SIZE(items);
    if (n == 0)
        return 0;
    if ((prog->ops = calloc_or_raise(n, sizeof(Op))) == NULL)
        return -1;
    prog->nops = n;
    for (i = 0; i < n; i++)
        if (load_op(PyTuple_GET_ITEM(items, i), index, 0, depth, &prog->ops[i]) < 0)
            return -1;
    return 0;
}

static Program *load_program(PyObject *obj, int depth)
{
    Program *prog;
    PyObject *index;
    if (depth > MAX_DEPTH) {
        bad_program("nested too deep");
        return NULL;
    }
    if (tuple_of(obj, 5, "struct") == NULL)
        return NULL;
    if ((prog = calloc_or_raise(1, sizeof(Program))) == NULL)
        return NULL;
    if ((index = PyDict_New()) == NULL
        || load_flag(PyTuple_GET_ITEM(obj, 0), &prog->flexible) < 0
        || load_template(prog, PyTuple_GET_ITEM(obj, 1), index) < 0
        || load_fresh(prog, PyTuple_GET_ITEM(obj, 2), index) < 0
        || load_ops(prog, PyTuple_GET_ITEM(obj, 3), index, depth) < 0
        || load_tagged(prog, PyTuple_GET_ITEM(obj, 4), index, depth) < 0) {
        Py_XDECREF(index);
        free_program(prog);
        return NULL;
    }
    Py_DECREF(index);
    return prog;
}

/* ------------------------------------------------------------------------------------
 * Errors: the same DecodeError as codec/wire.py's short() and invalid() build
 * ------------------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *b;      /* the buffer's bytes; b[0 .. len) readable */
    PyObject *view;        /* the memoryview, for zero-copy slices */
    Py_ssize_t p;          /* the position */
    int64_t budget;        /* struct, string and uuid array elements still allowed */
    const Helpers *h;
} Reader;

COLD static int raise_from(PyObject *factory, Py_ssize_t pos, const char *what)
{
    PyObject *exc = PyObject_CallFunction(factory, "ns", pos, what);
    if (exc == NULL)
        return -1;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return -1;
}

COLD static int fail_short(const Reader *r, Py_ssize_t pos, const char *what)
{
    return raise_from(r->h->short_, pos, what);
}

COLD static int fail_invalid(const Reader *r, Py_ssize_t pos, const char *what)
{
    return raise_from(r->h->invalid, pos, what);
}

/* ------------------------------------------------------------------------------------
 * Varints, lengths and fixed-size values
 * ------------------------------------------------------------------------------------ */

/* Bytes from p to end (0 <= p <= end <= the buffer's length holds throughout). */
static inline int64_t left(const Reader *r, Py_ssize_t end)
{
    return (int64_t)(end - r->p);
}

/* wire.read_uvarint past a first byte of 0x80 or more (at r->p - 1): up to 5 bytes,
 * so up to 35 bits. */
NOINLINE static int read_uvarint_rest(Reader *r, Py_ssize_t end, int64_t *out)
{
    Py_ssize_t p = r->p;
    int64_t result = r->b[p - 1] & 0x7F;
    int shift = 7;
    uint8_t byte;
    for (;;) {
        if (p >= end)
            return fail_short(r, p, "varint");
        byte = r->b[p++];
        result |= (int64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = result;
            r->p = p;
            return 0;
        }
        shift += 7;
        if (shift > 28)
            return fail_invalid(r, p, "varint longer than 5 bytes");
    }
}

/* wire.read_uvarint; most varints (lengths, counts) are one byte. */
static inline int read_uvarint(Reader *r, Py_ssize_t end, int64_t *out)
{
    uint8_t byte;
    if (r->p >= end)
        return fail_short(r, r->p, "varint");
    byte = r->b[r->p++];
    if (byte < 0x80) {
        *out = byte;
        return 0;
    }
    return read_uvarint_rest(r, end, out);
}

/* compiler.emit_length: a compact length minus one, or a big-endian int16/int32. */
static inline int read_length(Reader *r, Py_ssize_t end, int flex, int width, int64_t *out)
{
    const uint8_t *s;
    if (flex) {
        if (read_uvarint(r, end, out) < 0)
            return -1;
        *out -= 1;
        return 0;
    }
    if (left(r, end) < width)
        return fail_short(r, r->p, "length");
    s = r->b + r->p;
    if (width == 2)
        *out = (int16_t)(uint16_t)((unsigned)s[0] << 8 | s[1]);
    else
        *out = (int32_t)((uint32_t)s[0] << 24 | (uint32_t)s[1] << 16 | (uint32_t)s[2] << 8 | s[3]);
    r->p += width;
    return 0;
}

static inline uint16_t be16(const uint8_t *s)
{
    return (uint16_t)((unsigned)s[0] << 8 | s[1]);
}

static inline uint32_t be32(const uint8_t *s)
{
    return (uint32_t)s[0] << 24 | (uint32_t)s[1] << 16 | (uint32_t)s[2] << 8 | s[3];
}

/* CPython's small ints, held here so the commonest values cost no call. */
#define SMALL_MIN (-5)
#define SMALL_MAX 256
static PyObject *small_ints[SMALL_MAX - SMALL_MIN + 1];

static inline PyObject *int_of(long value)
{
    if (value >= SMALL_MIN && value <= SMALL_MAX)
        return Py_NewRef(small_ints[value - SMALL_MIN]);
    return PyLong_FromLong(value);
}

/* A fixed-size value at s (the caller checked its bytes), as struct.unpack's '>' + code. */
static inline PyObject *unpack_fixed(const uint8_t *s, char code)
{
    switch (code) {
    case 'b': return int_of((int8_t)s[0]);
    case '?': return PyBool_FromLong(s[0] != 0);
    case 'h': return int_of((int16_t)be16(s));
    case 'H': return int_of(be16(s));
    case 'i': return int_of((int32_t)be32(s));
    case 'I': return PyLong_FromUnsignedLong(be32(s));
    case 'q': {
        int64_t value = (int64_t)((uint64_t)be32(s) << 32 | be32(s + 4));
        return value >= SMALL_MIN && value <= SMALL_MAX ? int_of((long)value) : PyLong_FromLongLong(value);
    }
    case 'd': {
        double d = PyFloat_Unpack8((const char *)s, 0);
        if (d == -1.0 && PyErr_Occurred())
            return NULL;
        return PyFloat_FromDouble(d);
    }
    default:
        PyErr_SetString(PyExc_SystemError, "bad fixed code");
        return NULL;
    }
}

/* A zero-copy view of buf[start:stop], as the Python decoder's `b[p:stop]`. A view of
 * the whole memoryview (sharing its managed buffer), narrowed before anyone sees it,
 * is what memoryview's own slicing builds for a 1-D byte view, without the slice
 * object and its two ints; anything unexpected takes the slice path. */
static PyObject *slice_view(const Reader *r, Py_ssize_t start, Py_ssize_t stop)
{
    PyObject *lo, *hi, *slice, *view = PyMemoryView_FromObject(r->view);
    Py_buffer *b;
    if (view == NULL)
        return NULL;
    b = PyMemoryView_GET_BUFFER(view);
    if (b->ndim == 1 && b->itemsize == 1 && b->shape != NULL && b->strides != NULL
        && b->strides[0] == 1 && b->buf == (const void *)r->b && b->suboffsets == NULL) {
        b->buf = (char *)b->buf + start;
        b->len = stop - start;
        b->shape[0] = stop - start;
        return view;
    }
    Py_DECREF(view);
    lo = PyLong_FromSsize_t(start);
    hi = PyLong_FromSsize_t(stop);
    slice = (lo != NULL && hi != NULL) ? PySlice_New(lo, hi, NULL) : NULL;
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    if (slice == NULL)
        return NULL;
    view = PyObject_GetItem(r->view, slice);
    Py_DECREF(slice);
    return view;
}

/* ------------------------------------------------------------------------------------
 * Values
 * ------------------------------------------------------------------------------------ */

/* A struct's values while it is decoded, by slot; NULL is the template's value. */
typedef struct {
    PyObject *slot[MAX_FIELDS];
    PyObject *unknown;    /* _unknown_tags, once there is one */
    PyObject *explicit_;  /* _explicit_tags, once there is one */
} Fields;

/* Set a slot, stealing value. The template's very object (a small int, False, None, "",
 * the zero uuid: codec/accel.py puts there what a field most likely holds) is kept as
 * NULL, which a dict copied from the template already holds. */
static int put(Fields *f, const Program *prog, Py_ssize_t slot, PyObject *value)
{
    PyObject *old = f->slot[slot];
    if (value == NULL)
        return -1;
    if (value == prog->values[slot]) {
        Py_DECREF(value);
        value = NULL;
    }
    f->slot[slot] = value;
    Py_XDECREF(old);
    return 0;
}

static PyObject *decode_struct(Reader *r, const Program *prog, Py_ssize_t end);

/* _emit_fixed_run: one check for the run (and the byte after it with peek). */
static int read_fixed_run(Reader *r, const Op *op, Py_ssize_t end, const Program *prog, Fields *f)
{
    Py_ssize_t i, at = r->p;
    if (left(r, end) < op->run_size + op->peek)
        return fail_short(r, r->p, "value");
    for (i = 0; i < op->nfixed; i++) {
        const FixedField *field = &op->fixed[i];
        if (put(f, prog, field->slot, unpack_fixed(r->b + at, field->code)) < 0)
            return -1;
        at += field->size;
    }
    r->p = at;
    return 0;
}

/* A string's UTF-8 (strict), as PyUnicode_DecodeUTF8. Kafka's strings are mostly ASCII,
 * which needs only a check and a copy; the rest, and the strings of 0 or 1 characters
 * (CPython shares them), take PyUnicode_DecodeUTF8. */
static PyObject *decode_text(const uint8_t *s, Py_ssize_t n)
{
    uint64_t bits = 0, word;
    Py_ssize_t i = 0;
    PyObject *text;
    for (; i + 8 <= n; i += 8) {
        memcpy(&word, s + i, 8);
        bits |= word;
    }
    for (; i < n; i++)
        bits |= s[i];
    if (n <= 1 || (bits & UINT64_C(0x8080808080808080)) != 0)
        return PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    text = PyUnicode_New(n, 127);
    if (text != NULL)
        memcpy(PyUnicode_1BYTE_DATA(text), s, (size_t)n);
    return text;
}

static const char *sized_name(int kind)
{
    return kind == OP_STRING ? "string" : kind == OP_BYTES ? "bytes" : "records";
}

/* _emit_sized: a string (UTF-8, strict) or a zero-copy bytes/records view. */
static inline PyObject *read_sized(Reader *r, const Op *op, Py_ssize_t end)
{
    int64_t length = 0;
    Py_ssize_t start;
    if (read_length(r, end, op->flex, op->kind == OP_STRING ? 2 : 4, &length) < 0)
        return NULL;
    if (length < 0) {
        if (op->nullable)
            Py_RETURN_NONE;
        fail_invalid(r, r->p, "null in a field that is not nullable");
        return NULL;
    }
    if (op->peek ? length >= left(r, end) : length > left(r, end)) {
        fail_short(r, r->p, sized_name(op->kind));
        return NULL;
    }
    start = r->p;
    if (op->kind == OP_STRING) {
        PyObject *text = decode_text(r->b + start, (Py_ssize_t)length);
        if (text != NULL)
            r->p = start + (Py_ssize_t)length;
        return text;
    }
    r->p = start + (Py_ssize_t)length;
    return slice_view(r, start, r->p);
}

static PyObject *read_uuid(Reader *r, Py_ssize_t end)
{
    PyObject *raw, *uuid;
    if (left(r, end) < 16) {
        fail_short(r, r->p, "uuid");
        return NULL;
    }
    raw = PyBytes_FromStringAndSize((const char *)r->b + r->p, 16);
    if (raw == NULL)
        return NULL;
    uuid = PyObject_CallOneArg(r->h->uuid_of, raw);
    Py_DECREF(raw);
    if (uuid != NULL)
        r->p += 16;
    return uuid;
}

/* _emit_struct: a nullable struct has a marker byte, 0xFF for null. */
static PyObject *read_struct(Reader *r, const Op *op, Py_ssize_t end)
{
    if (op->nullable) {
        if (r->p >= end) {
            fail_short(r, r->p, "struct marker");
            return NULL;
        }
        r->p += 1;
        if (r->b[r->p - 1] == 0xFF)
            Py_RETURN_NONE;
    }
    return decode_struct(r, op->sub, end);
}

static PyObject *read_value(Reader *r, const Op *op, Py_ssize_t end);

/* Fixed-size elements: all in one go, as `unpack_from('>%di' % count)`. */
static PyObject *read_fixed_elements(Reader *r, const FixedField *f, int64_t count)
{
    const uint8_t *s = r->b + r->p;
    PyObject *list = PyList_New((Py_ssize_t)count);
    Py_ssize_t i;
    if (list == NULL)
        return NULL;
    for (i = 0; i < (Py_ssize_t)count; i++) {
        PyObject *value = f->code == 'i' ? int_of((int32_t)be32(s + i * 4))
                                         : unpack_fixed(s + i * f->size, f->code);
        if (value == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, value);
    }
    r->p += (Py_ssize_t)count * f->size;
    return list;
}

/* Struct, string and uuid elements: each costs one of the decode's element budget. */
static PyObject *read_elements(Reader *r, const Op *element, int64_t count, Py_ssize_t end)
{
    PyObject *list;
    Py_ssize_t i;
    if (count > 0) {
        r->budget -= count;
        if (r->budget < 0) {
            fail_invalid(r, r->p, "more array elements than the decode budget");
            return NULL;
        }
    }
    list = PyList_New((Py_ssize_t)count);  /* unset items are NULL: list_dealloc allows it */
    if (list == NULL)
        return NULL;
    for (i = 0; i < (Py_ssize_t)count; i++) {
        PyObject *item = read_value(r, element, end);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* _emit_array: the count is checked against the bytes left before any allocation. */
static PyObject *read_array(Reader *r, const Op *op, Py_ssize_t end)
{
    int64_t count = 0;
    if (read_length(r, end, op->flex, 4, &count) < 0)
        return NULL;
    if (count < 0) {
        if (op->nullable)
            Py_RETURN_NONE;
        fail_invalid(r, r->p, "null array in a field that is not nullable");
        return NULL;
    }
    /* count < 2^35 and min_size <= 2^20: the product cannot overflow */
    if (op->peek ? count * op->min_size >= left(r, end) : count * op->min_size > left(r, end)) {
        fail_invalid(r, r->p, "array count exceeds the bytes left");
        return NULL;
    }
    if (op->element->kind == OP_FIXED)
        return read_fixed_elements(r, &op->element->fixed[0], count);
    return read_elements(r, op->element, count, end);
}

static PyObject *read_value(Reader *r, const Op *op, Py_ssize_t end)
{
    switch (op->kind) {
    case OP_STRING: case OP_BYTES: case OP_RECORDS:
        return read_sized(r, op, end);
    case OP_UUID:
        return read_uuid(r, end);
    case OP_STRUCT:
        return read_struct(r, op, end);
    case OP_ARRAY:
        return read_array(r, op, end);
    default:  /* OP_FIXED is read by read_fixed_run; load_op refuses anything else */
        PyErr_SetString(PyExc_SystemError, "bad op kind");
        return NULL;
    }
}

/* Decode one field (or a run of fixed ones) into its slot. */
static inline int apply_op(Reader *r, const Op *op, Py_ssize_t end, const Program *prog, Fields *f)
{
    if (op->kind == OP_FIXED)
        return read_fixed_run(r, op, end, prog, f);
    return put(f, prog, op->slot, read_value(r, op, end));
}

/* ------------------------------------------------------------------------------------
 * Structs and their tagged fields
 * ------------------------------------------------------------------------------------ */

/* A new copy of a list or dict default (nested ones too), as the Python decoder's
 * literal builds; anything else is immutable and shared. */
static PyObject *fresh_copy(PyObject *obj, int depth)
{
    PyObject *copy, *key, *value;
    Py_ssize_t i;
    if (depth > MAX_DEPTH) {
        PyErr_SetString(PyExc_RecursionError, "default nested too deep");
        return NULL;
    }
    if (PyList_CheckExact(obj)) {
        copy = PyList_New(PyList_GET_SIZE(obj));
        for (i = 0; copy != NULL && i < PyList_GET_SIZE(obj); i++) {
            value = fresh_copy(PyList_GET_ITEM(obj, i), depth + 1);
            if (value == NULL)
                Py_CLEAR(copy);
            else
                PyList_SET_ITEM(copy, i, value);
        }
        return copy;
    }
    if (!PyDict_CheckExact(obj))
        return Py_NewRef(obj);
    copy = PyDict_New();
    i = 0;
    while (copy != NULL && PyDict_Next(obj, &i, &key, &value)) {
        PyObject *item = fresh_copy(value, depth + 1);
        if (item == NULL || PyDict_SetItem(copy, key, item) < 0)
            Py_CLEAR(copy);
        Py_XDECREF(item);
    }
    return copy;
}

/* Tagged fields whose default is a list or a dict get a new one per decode. */
NOINLINE static int put_fresh_defaults(const Program *prog, Fields *f)
{
    Py_ssize_t i;
    for (i = 0; i < prog->nfresh; i++) {
        const Fresh *fresh = &prog->fresh[i];
        PyObject *value;
        if (!fresh->shallow)
            value = fresh_copy(fresh->deflt, 0);
        else if (PyList_CheckExact(fresh->deflt))
            value = PyList_GetSlice(fresh->deflt, 0, PyList_GET_SIZE(fresh->deflt));
        else
            value = PyDict_Copy(fresh->deflt);
        if (put(f, prog, fresh->slot, value) < 0)
            return -1;
    }
    return 0;
}

static const Tagged *find_tag(const Program *prog, int64_t tag)
{
    Py_ssize_t i;
    for (i = 0; i < prog->ntagged; i++)
        if (prog->tagged[i].tag == tag)
            return &prog->tagged[i];
    return NULL;
}

/* Append `item` to *list, creating the list first; steals item. */
static int append_new(PyObject **list, PyObject *item)
{
    int status;
    if (item == NULL)
        return -1;
    if (*list == NULL && (*list = PyList_New(0)) == NULL) {
        Py_DECREF(item);
        return -1;
    }
    status = PyList_Append(*list, item);
    Py_DECREF(item);
    return status;
}

/* A known tagged field ending at `stop`: its value must end there, and a value equal to
 * the default is remembered in _explicit_tags (the encoder then writes it back). */
static int read_known_tag(Reader *r, const Tagged *t, Py_ssize_t stop, const Program *prog, Fields *f)
{
    PyObject *value, *equal;
    int same;
    if (apply_op(r, &t->op, stop, prog, f) < 0)
        return -1;
    if (r->p != stop)
        return fail_invalid(r, r->p, "tagged field size mismatch");
    value = f->slot[t->slot] != NULL ? f->slot[t->slot] : prog->values[t->slot];
    Py_INCREF(value);  /* `==` may run Python code */
    equal = PyObject_RichCompare(value, t->deflt, Py_EQ);
    Py_DECREF(value);
    if (equal == NULL)
        return -1;
    same = PyObject_IsTrue(equal);
    Py_DECREF(equal);
    if (same < 0)
        return -1;
    return same ? append_new(&f->explicit_, PyLong_FromLongLong(t->tag)) : 0;
}

/* An unknown tagged field: kept as (tag, view), at most max_unknown_tags of them. */
static int read_unknown_tag(Reader *r, int64_t tag, Py_ssize_t stop, Fields *f)
{
    PyObject *tag_obj, *raw, *pair;
    if (f->unknown != NULL && PyList_GET_SIZE(f->unknown) >= r->h->max_unknown_tags)
        return fail_invalid(r, r->p, "too many tagged fields");
    tag_obj = PyLong_FromLongLong(tag);
    raw = tag_obj == NULL ? NULL : slice_view(r, r->p, stop);
    pair = raw == NULL ? NULL : PyTuple_Pack(2, tag_obj, raw);
    Py_XDECREF(tag_obj);
    Py_XDECREF(raw);
    if (pair == NULL)
        return -1;
    r->p = stop;
    return append_new(&f->unknown, pair);
}

/* The tagged fields section (_emit_tagged, read_unknown_tags), when not a 0 byte. */
NOINLINE static int read_tagged(Reader *r, const Program *prog, Py_ssize_t end, Fields *f)
{
    int64_t count, i;
    if (read_uvarint(r, end, &count) < 0)
        return -1;
    if (count > left(r, end))
        return fail_invalid(r, r->p, "tagged field count exceeds the bytes left");
    for (i = 0; i < count; i++) {
        int64_t tag, size;
        const Tagged *known;
        int status;
        if (read_uvarint(r, end, &tag) < 0 || read_uvarint(r, end, &size) < 0)
            return -1;
        if (size > left(r, end))
            return fail_short(r, r->p, "tagged field");
        known = find_tag(prog, tag);
        if (known != NULL)
            status = read_known_tag(r, known, r->p + (Py_ssize_t)size, prog, f);
        else
            status = read_unknown_tag(r, tag, r->p + (Py_ssize_t)size, f);
        if (status < 0)
            return -1;
    }
    return 0;
}

#if DIRECT_DICT
/* insertdict's MAINTAIN_TRACKING: a dict holding a (possibly) tracked object is tracked. */
static inline int may_be_tracked(PyObject *obj)
{
    PyTypeObject *type = Py_TYPE(obj);
    return PyType_IS_GC(type) && (type->tp_is_gc == NULL || type->tp_is_gc(obj))
           && (!PyTuple_CheckExact(obj) || PyObject_GC_IsTracked(obj));
}

/* What PyDict_SetItem(dict, keys[i], value) does to a copy of the template, without
 * the lookup: entry i holds keys[i] (direct_layout checked it at load; the checks here
 * make a template changed since then take the slow path, not write out of place).
 * ma_version_tag is left as PyDict_Copy set it, a fresh one nobody has read yet: the
 * dict has not escaped, so it still names one state, this one. Returns whether it
 * took every slot (those it did not take are left for PyDict_SetItem). */
static int put_direct(PyObject *dict, const Program *prog, Fields *f)
{
    PyDictObject *mp = (PyDictObject *)dict;
    PyDictKeysObject *dk = mp->ma_keys;
    PyDictUnicodeEntry *entries;
    Py_ssize_t i;
    int tracked, all = 1;
    if (mp->ma_values != NULL || dk->dk_kind != DICT_KEYS_UNICODE || dk->dk_nentries != prog->nkeys)
        return 0;
    entries = DK_UNICODE_ENTRIES(dk);
    tracked = PyObject_GC_IsTracked(dict);
    for (i = 0; i < prog->nkeys; i++) {
        PyObject *value = f->slot[i], *old;
        if (value == NULL)
            continue;
        if (entries[i].me_key != prog->keys[i]) {
            all = 0;
            continue;
        }
        f->slot[i] = NULL;  /* the dict takes it */
        old = entries[i].me_value;
        entries[i].me_value = value;
        if (!tracked && may_be_tracked(value)) {
            PyObject_GC_Track(dict);
            tracked = 1;
        }
        Py_XDECREF(old);  /* the template's, which the template still holds */
    }
    return all;
}
#endif

/* The struct's dict: its keys in the template's order, then _unknown_tags and
 * _explicit_tags if any, as the Python decoder's dict literal and assignments. */
static PyObject *build_dict(const Program *prog, Fields *f, const Helpers *h)
{
    Py_ssize_t i = 0;
    PyObject *dict = PyDict_Copy(prog->template_);
#if DIRECT_DICT
    if (dict != NULL && prog->direct && put_direct(dict, prog, f))
        i = prog->nkeys;  /* it took every slot */
#endif
    for (; dict != NULL && i < prog->nkeys; i++) {
        PyObject *value = f->slot[i];
        if (value == NULL)
            continue;
        f->slot[i] = NULL;  /* the dict takes it */
        if (PyDict_SetItem(dict, prog->keys[i], value) < 0)
            Py_CLEAR(dict);
        Py_DECREF(value);
    }
    if (dict != NULL && f->unknown != NULL && PyDict_SetItem(dict, h->unknown_key, f->unknown) < 0)
        Py_CLEAR(dict);
    if (dict != NULL && f->explicit_ != NULL && PyDict_SetItem(dict, h->explicit_key, f->explicit_) < 0)
        Py_CLEAR(dict);
    return dict;
}

static PyObject *decode_struct(Reader *r, const Program *prog, Py_ssize_t end)
{
    Fields f;
    Py_ssize_t i;
    PyObject *dict = NULL;
    for (i = 0; i < prog->nkeys; i++)
        f.slot[i] = NULL;
    f.unknown = f.explicit_ = NULL;
    for (i = 0; i < prog->nops; i++)
        if (apply_op(r, &prog->ops[i], end, prog, &f) < 0)
            goto done;
    if (prog->flexible) {
        if (prog->nfresh > 0 && put_fresh_defaults(prog, &f) < 0)
            goto done;
        if (r->p < end && r->b[r->p] == 0)  /* no tagged fields: the usual case */
            r->p += 1;
        else if (read_tagged(r, prog, end, &f) < 0)
            goto done;
    }
    dict = build_dict(prog, &f, r->h);
done:
    if (dict == NULL)  /* else build_dict took them all */
        for (i = 0; i < prog->nkeys; i++)
            Py_XDECREF(f.slot[i]);
    Py_XDECREF(f.unknown);
    Py_XDECREF(f.explicit_);
    return dict;
}

/* ------------------------------------------------------------------------------------
 * The decoder object
 * ------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Program *prog;
    PyObject *fallback;   /* the Python decoder: calls the C one does not take */
    PyObject *helpers;    /* the tuple h's references come from */
    PyObject *name;
    Helpers h;
} DecoderObject;

/* The budget list's first item, if the call is one the C decoder takes. */
static int budget_of(PyObject *budget, int64_t *out)
{
    PyObject *first;
    int overflow = 0;
    long long value;
    if (!PyList_CheckExact(budget) || PyList_GET_SIZE(budget) < 1)
        return 0;
    first = PyList_GET_ITEM(budget, 0);
    if (!PyLong_CheckExact(first))
        return 0;
    value = PyLong_AsLongLongAndOverflow(first, &overflow);
    if (overflow || (value == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    /* far from int64's ends: decrements (each < 2^35) then cannot overflow */
    if (value > ((long long)1 << 62) || value < -((long long)1 << 62))
        return 0;
    *out = value;
    return 1;
}

static int position_of(PyObject *obj, Py_ssize_t *out)
{
    if (!PyLong_CheckExact(obj))
        return 0;
    *out = PyLong_AsSsize_t(obj);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* Whether the C decoder takes the call: a 1-D memoryview of unsigned bytes, exact ints
 * with 0 <= pos <= end <= len(buf), a list budget. On success `view` holds an export
 * of the buffer (so it can be neither released nor resized while we read it); its
 * layout is checked on that export, never on a memoryview that may be released. */
static int takes(PyObject *const *args, Reader *r, Py_ssize_t *end, Py_buffer *view)
{
    if (!PyMemoryView_Check(args[0]) || !position_of(args[1], &r->p) || !position_of(args[2], end)
        || !budget_of(args[3], &r->budget))
        return 0;
    if (PyObject_GetBuffer(args[0], view, PyBUF_FULL_RO) < 0) {  /* a released view, say */
        PyErr_Clear();
        return 0;
    }
    if (view->ndim != 1 || view->itemsize != 1 || view->format == NULL || strcmp(view->format, "B") != 0
        || view->strides == NULL || view->strides[0] != 1 || view->suboffsets != NULL
        || r->p < 0 || r->p > *end || *end > view->len) {
        PyBuffer_Release(view);
        return 0;
    }
    r->b = view->buf;
    r->view = args[0];
    return 1;
}

/* Write the budget back, as the Python decoder's `k[0] -= count` leaves it, keeping
 * any exception being raised. */
static int store_budget(PyObject *budget, int64_t start, int64_t now)
{
    PyObject *type, *value, *tb, *number;
    int status;
    if (now == start)
        return 0;
    PyErr_Fetch(&type, &value, &tb);
    number = PyLong_FromLongLong(now);
    status = number == NULL ? -1 : PyList_SetItem(budget, 0, number);  /* steals number */
    if (type != NULL) {
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return 0;
    }
    return status;
}

static PyObject *decoder_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames)
{
    DecoderObject *d = (DecoderObject *)self;
    Reader r;
    Py_buffer view;
    Py_ssize_t end;
    int64_t start_budget;
    PyObject *dict, *result, *position;
    if (kwnames != NULL || PyVectorcall_NARGS(nargsf) != 4 || !takes(args, &r, &end, &view))
        return PyObject_Vectorcall(d->fallback, args, nargsf, kwnames);
    r.h = &d->h;
    start_budget = r.budget;
    dict = decode_struct(&r, d->prog, end);
    PyBuffer_Release(&view);
    if (store_budget(args[3], start_budget, r.budget) < 0) {
        Py_XDECREF(dict);
        return NULL;
    }
    if (dict == NULL)
        return NULL;
    result = PyTuple_New(2);
    position = result == NULL ? NULL : PyLong_FromSsize_t(r.p);
    if (position == NULL) {
        Py_DECREF(dict);
        Py_XDECREF(result);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, dict);
    PyTuple_SET_ITEM(result, 1, position);
    return result;
}

static void decoder_dealloc(PyObject *self)
{
    DecoderObject *d = (DecoderObject *)self;
    PyObject_GC_UnTrack(self);
    free_program(d->prog);
    Py_XDECREF(d->fallback);
    Py_XDECREF(d->helpers);
    Py_XDECREF(d->name);
    PyObject_GC_Del(self);
}

/* Only the fallback (a Python closure) and the helpers could lead back here. */
static int decoder_traverse(PyObject *self, visitproc visit, void *arg)
{
    DecoderObject *d = (DecoderObject *)self;
    Py_VISIT(d->fallback);
    Py_VISIT(d->helpers);
    return 0;
}

static int decoder_clear(PyObject *self)
{
    DecoderObject *d = (DecoderObject *)self;
    PyObject *fallback = d->fallback;
    /* keep a callable there: a decoder may still be called after a clear */
    d->fallback = Py_NewRef(Py_None);
    Py_XDECREF(fallback);
    return 0;
}

static PyObject *decoder_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<codec._accel decoder %S>", ((DecoderObject *)self)->name);
}

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "codec._accel.Decoder",
    .tp_basicsize = sizeof(DecoderObject),
    .tp_dealloc = decoder_dealloc,
    .tp_vectorcall_offset = offsetof(DecoderObject, vectorcall),
    .tp_repr = decoder_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A Kafka struct decoder: f(buf, pos, end, budget) -> (dict, pos).",
    .tp_traverse = decoder_traverse,
    .tp_clear = decoder_clear,
};

static int load_helpers(PyObject *tuple, Helpers *h)
{
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != 6)
        return bad_program("helpers");
    h->short_ = PyTuple_GET_ITEM(tuple, 0);
    h->invalid = PyTuple_GET_ITEM(tuple, 1);
    h->uuid_of = PyTuple_GET_ITEM(tuple, 2);
    h->max_unknown_tags = PyLong_Check(PyTuple_GET_ITEM(tuple, 3))
        ? PyLong_AsSsize_t(PyTuple_GET_ITEM(tuple, 3)) : -1;
    h->unknown_key = PyTuple_GET_ITEM(tuple, 4);
    h->explicit_key = PyTuple_GET_ITEM(tuple, 5);
    if (!PyCallable_Check(h->short_) || !PyCallable_Check(h->invalid) || !PyCallable_Check(h->uuid_of)
        || h->max_unknown_tags < 1 || !PyUnicode_CheckExact(h->unknown_key)
        || !PyUnicode_CheckExact(h->explicit_key)) {
        PyErr_Clear();
        return bad_program("helpers");
    }
    return 0;
}

static PyObject *make_decoder(PyObject *module, PyObject *args)
{
    PyObject *program, *fallback, *helpers, *name;
    DecoderObject *d;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOO!U:make_decoder", &program, &fallback, &PyTuple_Type, &helpers, &name))
        return NULL;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "fallback must be callable");
        return NULL;
    }
    d = PyObject_GC_New(DecoderObject, &DecoderType);
    if (d == NULL)
        return NULL;
    d->vectorcall = decoder_vectorcall;
    d->prog = NULL;
    d->fallback = Py_NewRef(fallback);
    d->helpers = Py_NewRef(helpers);  /* owns the references in d->h */
    d->name = Py_NewRef(name);
    if (load_helpers(helpers, &d->h) < 0 || (d->prog = load_program(program, 0)) == NULL) {
        Py_DECREF(d);
        return NULL;
    }
    PyObject_GC_Track(d);
    return (PyObject *)d;
}

static PyMethodDef module_methods[] = {
    {"make_decoder", make_decoder, METH_VARARGS,
     "make_decoder(program, fallback, helpers, name): a decoder running the program "
     "(see codec/accel.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef accel_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "codec._accel",
    .m_doc = "Kafka struct decoding in C: see codec/accel.py.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__accel(void)
{
    long i;
    for (i = SMALL_MIN; i <= SMALL_MAX; i++)
        if (small_ints[i - SMALL_MIN] == NULL && (small_ints[i - SMALL_MIN] = PyLong_FromLong(i)) == NULL)
            return NULL;
    if (PyType_Ready(&DecoderType) < 0)
        return NULL;
    return PyModule_Create(&accel_module);
}
