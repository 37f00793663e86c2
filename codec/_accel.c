/* codec._accel: the layout description (codec/layout/) run in C.
 *
 * Decoder(struct, decode_fallback, skim_fallback) loads a layout.Struct into the C tree
 * below, checking everything memory safety relies on, and runs it as codec/interpreter.py
 * runs it: decoder(buf, pos, end, budget) -> (dict, pos) is interpreter.decode, and
 * decoder.skim(buf, pos, end, budget, found) -> pos is interpreter.skim. The functions
 * have the Python ones' names and shape (struct, value, array, tagged); the Python one is
 * the reference, and tests/codec/test_codec_accel.py holds this one to the same dicts,
 * positions, budgets and errors (class, message, offset). Calls it does not take (a
 * buffer that is not a 1-D byte memoryview, positions out of it, a budget that is not a
 * list holding an int) go to the fallbacks, the Python interpreter, unchanged.
 *
 * Skimming a picked layout (codec.layout.picked: Field.pick, Struct.emits, Struct.columns),
 * the skim also appends to found["rows"] a tuple of the picked columns after each element
 * of the struct that emits them: a narrow read of a few fields, in the same walk with the
 * same checks, no dict per struct ("Picked columns", with the skim's values below).
 *
 * Collector(node) runs codec/entities.py's paths to the topics, groups, transactional
 * ids and error codes of a decoded body ("Collecting entities", further down).
 *
 * summarize_records(buf, allow_partial_tail, max_bytes) is codec/records/stats.py's
 * summarize (without CRC checks): the record batches' headers walked and totalled in C,
 * further down ("Record batch headers").
 *
 * The numbers of kinds, framings and entities come from codec/generated/kinds.h, which
 * `python -m codec.generate` writes from codec/kinds.py; codec/accel.py checks NUMBERS
 * against codec.kinds at import.
 *
 * Memory safety: every read of the buffer (r->b) follows a check in the same function
 * that it ends at or before `end`, or, for a field in a run of fixed-size fields, the
 * run's check, which load_ops verified covers it (read_fixed_elements: its caller's count
 * check). takes() checks 0 <= pos <= end <= the buffer's length on an export that keeps
 * the buffer from being released or resized during the call. Lengths and counts are
 * int64 (a varint here carries up to 35 bits) and are compared with the bytes left,
 * never added to a position before that. Every function returns NULL or -1 with an
 * exception set, and its caller drops what it built so far.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>  /* T_OBJECT_EX, READONLY: RecordStats' slots (configure_records) */

#include "generated/kinds.h"

/* CPython 3.11 only (the layout verified at load, see put_direct): a decoded struct's
 * values go straight into its dict's entries, PyDict_SetItem's lookup skipped. Worth
 * the risk of writing into a private structure: the public API alone (this file built
 * with -DKAFKALENS_NO_DICT_WRITES) takes a quarter to a third more instructions per
 * decode (bench/PROFILE.md, "Kept, and what it saved"). The internal header needs
 * Py_BUILD_CORE, set only around it: the rest of this file sees the public API alone.
 * Where the header is not installed, the public API does it all (rather than the build
 * failing, which setup.py's optional=True would turn into no extension at all). */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && !defined(Py_LIMITED_API) \
    && !defined(PYPY_VERSION) && defined(__has_include) && !defined(KAFKALENS_NO_DICT_WRITES)
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

#define MAX_DEPTH 32              /* struct nesting: Kafka's schemas go 5 deep */
#define MAX_FIELDS 64             /* fields of one struct: Kafka's largest has 16 */
#define MAX_MIN_SIZE (1 << 20)    /* keeps count * element size far from overflow */
#define MAX_TAG ((int64_t)1 << 35) /* a 5-byte varint carries 35 bits */
#define MAX_COLUMNS 16            /* a picked layout's columns: codec.layout.MAX_COLUMNS */

typedef struct Program Program;

typedef struct Op {
    int kind, framing, nullable, peek, entity;
    int pick;             /* a picked layout: the column + 1 its value goes to; 0: none */
    int size;             /* fixed-size kinds and uuid: the value's bytes */
    int check;            /* fixed-size kinds and uuid: the bytes its check covers (0: its run's) */
    int run;              /* a regular field whose check covers a run of fixed-size fields: how many */
    int step;             /* regular fields: the ops to the next one not in its run */
    Py_ssize_t slot;      /* its key's index in the struct's keys; -1 for an array's element */
    int64_t tag;          /* tagged fields */
    int64_t min_size;     /* arrays: the fewest bytes one element takes */
    PyObject *name;       /* its key */
    PyObject *deflt;      /* tagged fields: a value equal to it goes to _explicit_tags */
    struct Op *element;   /* arrays */
    Program *sub;         /* structs */
} Op;

struct Program {
    int flexible;
    Py_ssize_t nkeys;
    PyObject **keys;      /* the dict's keys, in order */
    PyObject **values;    /* the C template's value of each key: see likely() */
    PyObject *template_;  /* keys -> values: each struct's dict starts as a copy */
    int direct;           /* a copy's entry i holds keys[i]: see put_direct */
    Py_ssize_t nops, ntagged, nfresh;
    Op *ops;              /* the regular fields, in wire order */
    Op *tagged;           /* the tagged fields, by tag */
    Op **fresh;           /* tagged fields whose default is copied per decode */
    Py_ssize_t pair_id, pair_topic;  /* skim: the slots of layout.Struct.topic_pair, or -1 */
    int emits;            /* a picked layout: a row after each of its elements (skim) */
    Py_ssize_t ncolumns;  /* a picked layout's message struct: len(columns); else 0 */
};

/* What codec/accel.py gives once: codec.wire's error factories and uuid cache. */
static PyObject *short_, *invalid, *uuid_of, *unknown_key, *explicit_key, *counts_key, *rows_key;
static PyObject *found_keys[5];   /* found's lists: topics, groups, transactional ids, errors, topic ids */
static Py_ssize_t max_unknown_tags;

/* ------------------------------------------------------------------------------------
 * Loading a layout.Struct
 * ------------------------------------------------------------------------------------ */

static void free_program(Program *prog);

static void clear_op(Op *op)
{
    Py_CLEAR(op->name);
    Py_CLEAR(op->deflt);
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
    for (i = 0; prog->tagged != NULL && i < prog->ntagged; i++)
        clear_op(&prog->tagged[i]);
    PyMem_Free(prog->tagged);
    PyMem_Free(prog->fresh);
    PyMem_Free(prog);
}

COLD static int bad_layout(const char *what)
{
    PyErr_Format(PyExc_ValueError, "invalid layout: %s", what);
    return -1;
}

static void *calloc_or_raise(Py_ssize_t n, size_t size)
{
    void *memory = PyMem_Calloc((size_t)(n > 0 ? n : 1), size);
    if (memory == NULL)
        PyErr_NoMemory();
    return memory;
}

/* An int attribute within [low, high], or None, read as `none`. */
static int int_attr(PyObject *obj, const char *name, int64_t low, int64_t high, int64_t none, int64_t *out)
{
    PyObject *value = PyObject_GetAttrString(obj, name);
    long long number;
    if (value == NULL)
        return -1;
    if (value == Py_None) {
        Py_DECREF(value);
        *out = none;
        return 0;
    }
    number = PyLong_Check(value) ? PyLong_AsLongLong(value) : low - 1;
    Py_DECREF(value);
    if (number == -1 && PyErr_Occurred())
        return -1;
    if (number < low || number > high)
        return bad_layout(name);
    *out = number;
    return 0;
}

static int small_attr(PyObject *obj, const char *name, int low, int high, int *out)
{
    int64_t value;
    if (int_attr(obj, name, low, high, low - 1, &value) < 0)
        return -1;
    *out = (int)value;
    return 0;
}

/* A tuple attribute (a new reference). */
static PyObject *tuple_attr(PyObject *obj, const char *name)
{
    PyObject *value = PyObject_GetAttrString(obj, name);
    if (value != NULL && !PyTuple_CheckExact(value)) {
        Py_DECREF(value);
        bad_layout(name);
        return NULL;
    }
    return value;
}

static int fixed_size(int kind)
{
    switch (kind) {
    case KIND_INT8: case KIND_BOOL: return 1;
    case KIND_INT16: case KIND_UINT16: return 2;
    case KIND_INT32: case KIND_UINT32: return 4;
    case KIND_INT64: case KIND_FLOAT64: return 8;
    case KIND_UUID: return 16;
    default: return 0;
    }
}

static Program *load_program(PyObject *layout, int depth);

/* One layout.Field; `index` maps a key to its slot (NULL for an array's element). */
static int load_op(PyObject *field, PyObject *index, int depth, Op *op)
{
    PyObject *sub = NULL;
    int64_t tag, min_size;
    int status = -1;
    memset(op, 0, sizeof(*op));
    op->slot = -1;
    if (small_attr(field, "kind", KIND_INT8, KIND_ARRAY, &op->kind) < 0
        || small_attr(field, "framing", FRAMING_NONE, FRAMING_MARKER, &op->framing) < 0
        || small_attr(field, "entity", ENTITY_NONE, ENTITY_TOPIC_ID, &op->entity) < 0
        || small_attr(field, "nullable", 0, 1, &op->nullable) < 0
        || small_attr(field, "peek", 0, 1, &op->peek) < 0
        || small_attr(field, "pick", 0, MAX_COLUMNS, &op->pick) < 0
        || small_attr(field, "size", 0, 16, &op->size) < 0
        || small_attr(field, "check", 0, 1 << 16, &op->check) < 0
        || int_attr(field, "tag", 0, MAX_TAG - 1, -1, &tag) < 0
        || int_attr(field, "min_size", 0, MAX_MIN_SIZE, 0, &min_size) < 0
        || (op->name = PyObject_GetAttrString(field, "name")) == NULL
        || (op->deflt = PyObject_GetAttrString(field, "default")) == NULL)
        return -1;
    op->tag = tag;
    op->min_size = min_size;
    if (!PyUnicode_CheckExact(op->name))
        return bad_layout("name");
    if (index != NULL) {
        PyObject *slot = PyDict_GetItemWithError(index, op->name);
        if (slot == NULL)
            return PyErr_Occurred() ? -1 : bad_layout("a field not in the template");
        op->slot = PyLong_AsSsize_t(slot);
    }
    if (op->size != fixed_size(op->kind) || (op->size == 0 && op->check != 0)
        || (op->kind == KIND_UUID && op->check != 16))
        return bad_layout("size");
    if (op->pick && (op->kind == KIND_STRUCT || op->kind == KIND_ARRAY || op->tag >= 0 || index == NULL))
        return bad_layout("a picked field that is not a regular scalar, uuid, string or bytes");
    if (op->kind == KIND_STRUCT) {
        if (op->framing != (op->nullable ? FRAMING_MARKER : FRAMING_NONE) || op->peek)
            return bad_layout("struct framing");
        if ((sub = PyObject_GetAttrString(field, "struct")) == NULL)
            return -1;
        op->sub = load_program(sub, depth + 1);
        status = op->sub == NULL ? -1 : 0;
    } else if (op->kind == KIND_ARRAY) {
        if ((op->framing != FRAMING_COMPACT && op->framing != FRAMING_INT32) || op->min_size < 1)
            return bad_layout("array framing");
        if ((sub = PyObject_GetAttrString(field, "element")) == NULL
            || (op->element = calloc_or_raise(1, sizeof(Op))) == NULL
            || load_op(sub, NULL, depth, op->element) < 0)
            goto done;
        if (op->element->kind == KIND_ARRAY || op->element->nullable || op->element->peek
            || (op->element->size && op->element->kind != KIND_UUID && op->element->size != op->min_size)
            || (op->peek && (op->element->size == 0 || op->element->kind == KIND_UUID)))
            status = bad_layout("array element");
        else
            status = 0;
    } else if (op->kind >= KIND_STRING) {
        int framing = op->framing;
        if (framing != FRAMING_COMPACT && framing != (op->kind == KIND_STRING ? FRAMING_INT16 : FRAMING_INT32))
            return bad_layout("length framing");
        status = 0;
    } else {
        status = op->framing != FRAMING_NONE || op->nullable || op->peek ? bad_layout("fixed framing") : 0;
    }
done:
    Py_XDECREF(sub);
    return status;
}

/* The regular fields. A fixed-size field of check 0 must be covered by the check of
 * the first field of its run: what lets read_run read the run after one check. */
static int load_ops(Program *prog, PyObject *layout, PyObject *index, int depth)
{
    PyObject *fields = tuple_attr(layout, "fields");
    Op *first = NULL;     /* the first field of the run being loaded */
    Py_ssize_t i, covered = 0;
    int status = 0;
    if (fields == NULL)
        return -1;
    prog->nops = PyTuple_GET_SIZE(fields);
    if ((prog->ops = calloc_or_raise(prog->nops, sizeof(Op))) == NULL)
        status = -1;
    for (i = 0; status == 0 && i < prog->nops; i++) {
        Op *op = &prog->ops[i];
        status = load_op(PyTuple_GET_ITEM(fields, i), index, depth, op);
        if (status < 0 || op->tag >= 0) {
            status = status < 0 ? -1 : bad_layout("a tagged field among the regular ones");
        } else if (op->size && op->kind != KIND_UUID) {
            if (op->check)
                first = op, covered = op->check;
            if (first == NULL || (covered -= op->size) < 0)
                status = bad_layout("a fixed-size field no check covers");
            else
                first->step = ++first->run;
        } else {
            op->step = 1;
            first = NULL;
        }
    }
    Py_DECREF(fields);
    return status;
}

static int load_tagged(Program *prog, PyObject *layout, PyObject *index, int depth)
{
    PyObject *fields = tuple_attr(layout, "tagged");
    Py_ssize_t i;
    int status = 0;
    if (fields == NULL)
        return -1;
    prog->ntagged = PyTuple_GET_SIZE(fields);
    if (prog->ntagged > 0 && !prog->flexible)
        status = bad_layout("tagged fields in a struct that is not flexible");
    else if ((prog->tagged = calloc_or_raise(prog->ntagged, sizeof(Op))) == NULL)
        status = -1;
    for (i = 0; status == 0 && i < prog->ntagged; i++) {
        Op *op = &prog->tagged[i];
        status = load_op(PyTuple_GET_ITEM(fields, i), index, depth, op);
        if (status == 0 && (op->tag < 0 || op->peek || (op->size && op->check != op->size)
                            || (i > 0 && op->tag <= prog->tagged[i - 1].tag)))
            status = bad_layout("tagged field");
    }
    Py_DECREF(fields);
    return status;
}

static Py_ssize_t slot_of(PyObject *index, PyObject *name)
{
    PyObject *slot = PyUnicode_CheckExact(name) ? PyDict_GetItemWithError(index, name) : NULL;
    if (slot == NULL)
        return PyErr_Occurred() ? -1 : bad_layout("a name not in the template");
    return PyLong_AsSsize_t(slot);
}

static int load_fresh(Program *prog, PyObject *layout, PyObject *index)
{
    PyObject *fields = tuple_attr(layout, "fresh");
    Py_ssize_t i, j;
    int status = 0;
    if (fields == NULL)
        return -1;
    prog->nfresh = PyTuple_GET_SIZE(fields);
    if ((prog->fresh = calloc_or_raise(prog->nfresh, sizeof(Op *))) == NULL)
        status = -1;
    for (i = 0; status == 0 && i < prog->nfresh; i++) {
        PyObject *name = PyObject_GetAttrString(PyTuple_GET_ITEM(fields, i), "name");
        Py_ssize_t slot = name == NULL ? -1 : slot_of(index, name);
        Py_XDECREF(name);
        for (j = 0; slot >= 0 && j < prog->ntagged; j++)
            if (prog->tagged[j].slot == slot)
                prog->fresh[i] = &prog->tagged[j];
        if (slot < 0)
            status = -1;
        else if (prog->fresh[i] == NULL || !(PyList_CheckExact(prog->fresh[i]->deflt) || PyDict_CheckExact(prog->fresh[i]->deflt)))
            status = bad_layout("fresh default");
    }
    Py_DECREF(fields);
    return status;
}

static int load_pair(Program *prog, PyObject *layout, PyObject *index)
{
    PyObject *pair = PyObject_GetAttrString(layout, "topic_pair");
    int status = 0;
    prog->pair_id = prog->pair_topic = -1;
    if (pair == NULL)
        return -1;
    if (pair != Py_None) {
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            status = bad_layout("topic_pair");
        else if ((prog->pair_id = slot_of(index, PyTuple_GET_ITEM(pair, 0))) < 0
                 || (prog->pair_topic = slot_of(index, PyTuple_GET_ITEM(pair, 1))) < 0)
            status = -1;
    }
    Py_DECREF(pair);
    return status;
}

/* A picked layout's marks (codec.layout.picked): whether the struct emits rows, and for
 * the message's struct how many columns they have. */
static int load_picks(Program *prog, PyObject *layout)
{
    PyObject *columns;
    if (small_attr(layout, "emits", 0, 1, &prog->emits) < 0 || (columns = tuple_attr(layout, "columns")) == NULL)
        return -1;
    prog->ncolumns = PyTuple_GET_SIZE(columns);
    Py_DECREF(columns);
    return prog->ncolumns > MAX_COLUMNS ? bad_layout("columns") : 0;
}

/* What a regular field's value most likely is, as a shared object (a small int, False,
 * "", the zero uuid: its default), or None: the C template holds it, and put() leaves a
 * value that is that very object to the template. */
static PyObject *likely(const Op *op)
{
    PyObject *d = op->deflt;
    if (op->nullable || op->kind == KIND_STRUCT || op->kind == KIND_ARRAY)
        return Py_None;
    if (PyLong_CheckExact(d)) {
        int overflow;
        long value = PyLong_AsLongAndOverflow(d, &overflow);
        return !overflow && value >= -5 && value <= 256 ? d : Py_None;
    }
    if (d == Py_False || (PyUnicode_CheckExact(d) && PyUnicode_GET_LENGTH(d) == 0) || op->kind == KIND_UUID)
        return d;
    return Py_None;
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

/* The keys and `index` (key -> slot) from layout.Struct.template; their values are set
 * by load_values once the fields are loaded. */
static int load_keys(Program *prog, PyObject *layout, PyObject *index)
{
    PyObject *template = PyObject_GetAttrString(layout, "template"), *key, *value, *slot;
    Py_ssize_t i, n, pos = 0;
    int status = 0;
    if (template == NULL)
        return -1;
    if (!PyDict_CheckExact(template) || (n = PyDict_GET_SIZE(template)) > MAX_FIELDS) {
        Py_DECREF(template);
        return bad_layout("template");
    }
    if ((prog->keys = calloc_or_raise(n, sizeof(PyObject *))) == NULL
        || (prog->values = calloc_or_raise(n, sizeof(PyObject *))) == NULL) {
        Py_DECREF(template);
        return -1;
    }
    prog->nkeys = n;
    for (i = 0; status == 0 && PyDict_Next(template, &pos, &key, &value); i++) {
        (void)value;
        if (!PyUnicode_CheckExact(key))
            status = bad_layout("template key");
        else if ((slot = PyLong_FromSsize_t(i)) == NULL)
            status = -1;
        else {
            prog->keys[i] = Py_NewRef(key);
            status = PyDict_SetItem(index, key, slot);
            Py_DECREF(slot);
        }
    }
    Py_DECREF(template);
    return status;
}

/* The C template: the tagged fields' defaults (None for fresh ones, set per decode),
 * the regular fields' likely values. Every key must be some field's. */
static int load_values(Program *prog)
{
    Py_ssize_t i;
    for (i = 0; i < prog->nops + prog->ntagged; i++) {
        const Op *op = i < prog->nops ? &prog->ops[i] : &prog->tagged[i - prog->nops];
        PyObject *value = i < prog->nops ? likely(op) : op->deflt;
        if (prog->values[op->slot] != NULL)
            return bad_layout("two fields of one key");
        if (PyList_CheckExact(value) || PyDict_CheckExact(value))
            value = Py_None;  /* a fresh default: put_fresh_defaults */
        prog->values[op->slot] = Py_NewRef(value);
    }
    if (prog->nops + prog->ntagged != prog->nkeys || (prog->template_ = PyDict_New()) == NULL)
        return prog->template_ == NULL && !PyErr_Occurred() ? bad_layout("a key of no field") : -1;
    for (i = 0; i < prog->nkeys; i++)
        if (PyDict_SetItem(prog->template_, prog->keys[i], prog->values[i]) < 0)
            return -1;
#if DIRECT_DICT
    if ((prog->direct = direct_layout(prog)) < 0)
        return -1;
#endif
    return 0;
}

static Program *load_program(PyObject *layout, int depth)
{
    Program *prog;
    PyObject *index;
    int flexible;
    if (depth > MAX_DEPTH) {
        bad_layout("nested too deep");
        return NULL;
    }
    if ((prog = calloc_or_raise(1, sizeof(Program))) == NULL)
        return NULL;
    if ((index = PyDict_New()) == NULL || small_attr(layout, "flexible", 0, 1, &flexible) < 0
        || (prog->flexible = flexible, load_keys(prog, layout, index)) < 0
        || load_ops(prog, layout, index, depth) < 0 || load_tagged(prog, layout, index, depth) < 0
        || load_fresh(prog, layout, index) < 0 || load_pair(prog, layout, index) < 0
        || load_picks(prog, layout) < 0 || load_values(prog) < 0) {
        Py_XDECREF(index);
        free_program(prog);
        return NULL;
    }
    Py_DECREF(index);
    return prog;
}

/* ------------------------------------------------------------------------------------
 * Reading: the buffer, varints, lengths, fixed-size values
 * ------------------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *b;      /* the buffer's bytes; b[0 .. len) readable */
    PyObject *view;        /* the memoryview, for zero-copy slices */
    Py_ssize_t p;          /* the position */
    int64_t budget;        /* struct, string, bytes and uuid array elements still allowed */
    PyObject *found[5];    /* skim: found's lists (borrowed), by ENTITY_ - 1; else NULL */
    int skim;
    PyObject *rows;        /* skimming a picked layout: found["rows"] (borrowed); else NULL */
    Py_ssize_t ncolumns;   /* its columns */
    PyObject *row[MAX_COLUMNS];  /* the columns read so far (owned; NULL: not read) */
} Reader;

/* The same DecodeError as codec/wire.py's short() and invalid() build. */
COLD static int raise_from(PyObject *factory, Py_ssize_t pos, const char *what)
{
    PyObject *exc = PyObject_CallFunction(factory, "ns", pos, what);
    if (exc == NULL)
        return -1;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return -1;
}

COLD static int fail_short(Py_ssize_t pos, const char *what)
{
    return raise_from(short_, pos, what);
}

COLD static int fail_invalid(Py_ssize_t pos, const char *what)
{
    return raise_from(invalid, pos, what);
}

/* Bytes from p to end (0 <= p <= end <= the buffer's length holds throughout). */
static inline int64_t left(const Reader *r, Py_ssize_t end)
{
    return (int64_t)(end - r->p);
}

/* wire.read_uvarint past a first byte of 0x80 or more (at r->p - 1): up to 5 bytes. */
NOINLINE static int read_uvarint_rest(Reader *r, Py_ssize_t end, int64_t *out)
{
    Py_ssize_t p = r->p;
    int64_t result = r->b[p - 1] & 0x7F;
    int shift = 7;
    uint8_t byte;
    for (;;) {
        if (p >= end)
            return fail_short(p, "varint");
        byte = r->b[p++];
        result |= (int64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = result;
            r->p = p;
            return 0;
        }
        shift += 7;
        if (shift > 28)
            return fail_invalid(p, "varint longer than 5 bytes");
    }
}

/* wire.read_uvarint; most varints (lengths, counts) are one byte. */
static inline int read_uvarint(Reader *r, Py_ssize_t end, int64_t *out)
{
    uint8_t byte;
    if (r->p >= end)
        return fail_short(r->p, "varint");
    byte = r->b[r->p++];
    if (byte < 0x80) {
        *out = byte;
        return 0;
    }
    return read_uvarint_rest(r, end, out);
}

static inline uint16_t be16(const uint8_t *s)
{
    return (uint16_t)((unsigned)s[0] << 8 | s[1]);
}

static inline uint32_t be32(const uint8_t *s)
{
    return (uint32_t)s[0] << 24 | (uint32_t)s[1] << 16 | (uint32_t)s[2] << 8 | s[3];
}

/* A length or count as its framing writes it: a compact one minus one, or an int16/int32. */
static inline int read_length(Reader *r, const Op *op, Py_ssize_t end, int64_t *out)
{
    int width = op->framing == FRAMING_INT16 ? 2 : 4;
    if (op->framing == FRAMING_COMPACT) {
        if (read_uvarint(r, end, out) < 0)
            return -1;
        *out -= 1;
        return 0;
    }
    if (left(r, end) < width)
        return fail_short(r->p, "length");
    *out = width == 2 ? (int16_t)be16(r->b + r->p) : (int32_t)be32(r->b + r->p);
    r->p += width;
    return 0;
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

/* A fixed-size value at s (the caller checked its bytes), as struct.unpack would. */
static inline PyObject *unpack_fixed(const uint8_t *s, int kind)
{
    switch (kind) {
    case KIND_INT8: return int_of((int8_t)s[0]);
    case KIND_BOOL: return PyBool_FromLong(s[0] != 0);
    case KIND_INT16: return int_of((int16_t)be16(s));
    case KIND_UINT16: return int_of(be16(s));
    case KIND_INT32: return int_of((int32_t)be32(s));
    case KIND_UINT32: return PyLong_FromUnsignedLong(be32(s));
    case KIND_INT64: {
        int64_t value = (int64_t)((uint64_t)be32(s) << 32 | be32(s + 4));
        return value >= SMALL_MIN && value <= SMALL_MAX ? int_of((long)value) : PyLong_FromLongLong(value);
    }
    case KIND_FLOAT64: {
        double d = PyFloat_Unpack8((const char *)s, 0);
        return d == -1.0 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(d);
    }
    default:
        PyErr_SetString(PyExc_SystemError, "not a fixed-size kind");
        return NULL;
    }
}

/* A zero-copy view of buf[start:stop], as the Python interpreter's `b[p:stop]`. A view
 * of the whole memoryview (sharing its managed buffer), narrowed before anyone sees it,
 * is what memoryview's own slicing builds for a 1-D byte view, without the slice object
 * and its two ints; anything unexpected takes the slice path. */
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

/* A string's UTF-8 (strict), as bytes.decode(). Kafka's strings are mostly ASCII, which
 * needs only a check and a copy; the rest, and the strings of 0 or 1 characters
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

/* Append `item` to a list, creating the list first if *list is NULL; steals item. */
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

/* skim: keep a value (borrowed) in found's list of its entity. */
static inline int keep(Reader *r, int entity, PyObject *value)
{
    return PyList_Append(r->found[entity - 1], value);
}

/* ------------------------------------------------------------------------------------
 * Picked columns (codec.layout.picked; interpreter.skim's found["rows"])
 *
 * Skimming a picked layout, each picked field's value goes to its column of the row
 * being made (r->row, one reference each), read as decoding would read it (a string
 * decoded, bytes or records a view of the frame, a uuid through codec.wire.uuid_of);
 * after each element of the struct that `emits`, a tuple of the columns (None where
 * not read) is appended to found["rows"]. Reads nothing itself: the values come from
 * the skim's own checked reads. Columns are within MAX_COLUMNS (load_op, load_picks).
 * ------------------------------------------------------------------------------------ */

/* Whether the skim keeps this field's value as a column. */
#define PICKS(r, op) ((op)->pick != 0 && (r)->rows != NULL)

/* Put a picked field's value (stolen) in its column. */
static inline int set_column(Reader *r, const Op *op, PyObject *value)
{
    if (value == NULL)
        return -1;
    Py_XSETREF(r->row[op->pick - 1], value);
    return 0;
}

/* The columns as they are, a tuple appended to found["rows"]. */
NOINLINE static int emit_row(Reader *r)
{
    PyObject *row = PyTuple_New(r->ncolumns);
    Py_ssize_t i;
    int status;
    if (row == NULL)
        return -1;
    for (i = 0; i < r->ncolumns; i++)
        PyTuple_SET_ITEM(row, i, Py_NewRef(r->row[i] != NULL ? r->row[i] : Py_None));
    status = PyList_Append(r->rows, row);
    Py_DECREF(row);
    return status;
}

/* ------------------------------------------------------------------------------------
 * Values (interpreter._value, _array)
 * ------------------------------------------------------------------------------------ */

/* A struct's values while it is decoded, by slot; NULL is the template's value. */
typedef struct {
    PyObject *slot[MAX_FIELDS];
    PyObject *const *likely;  /* the program's template values; skimming, none */
    PyObject *unknown;    /* _unknown_tags, once there is one */
    PyObject *explicit_;  /* _explicit_tags, once there is one */
    Py_ssize_t nunknown;  /* unknown tagged fields met (skimming keeps none) */
} Fields;

static PyObject *const no_likely[MAX_FIELDS];  /* all NULL */

/* Set a slot, stealing value. Decoding, the template's very object (see likely()) is
 * kept as NULL, which a dict copied from the template already holds. */
static inline int put(Fields *f, Py_ssize_t slot, PyObject *value)
{
    if (value == NULL)
        return -1;
    if (value == f->likely[slot]) {
        Py_DECREF(value);
        value = NULL;
    }
    Py_XSETREF(f->slot[slot], value);
    return 0;
}

static PyObject *decode_struct(Reader *r, const Program *prog, Py_ssize_t end, PyObject *counts);

/* skim: an error code that is not 0 (at s, in bounds) is kept. */
static int keep_error_code(Reader *r, const Op *op, const uint8_t *s)
{
    PyObject *code;
    int status;
    if (op->entity != ENTITY_ERROR_CODE || (s[0] | s[1]) == 0)
        return 0;
    if ((code = int_of((int16_t)be16(s))) == NULL)
        return -1;
    status = keep(r, op->entity, code);
    Py_DECREF(code);
    return status;
}

/* A fixed-size field alone (tagged): its own check. */
static PyObject *read_fixed(Reader *r, const Op *op, Py_ssize_t end)
{
    const uint8_t *s = r->b + r->p;
    if (left(r, end) < op->check) {
        fail_short(r->p, "value");
        return NULL;
    }
    r->p += op->size;
    if (r->skim)
        return keep_error_code(r, op, s) < 0 ? NULL : Py_NewRef(Py_None);
    return unpack_fixed(s, op->kind);
}

/* A run of op->run fixed-size fields from op on: one check (load_ops verified it covers
 * them all), then each into its slot. */
static int read_run(Reader *r, const Op *op, Py_ssize_t end, Fields *f)
{
    const uint8_t *s = r->b + r->p;
    const Op *stop = op + op->run;
    if (left(r, end) < op->check)
        return fail_short(r->p, "value");
    if (r->skim) {
        for (; op < stop; s += op->size, op++)
            if (keep_error_code(r, op, s) < 0 || (PICKS(r, op) && set_column(r, op, unpack_fixed(s, op->kind)) < 0))
                return -1;
    } else {
        for (; op < stop; s += op->size, op++)
            if (put(f, op->slot, unpack_fixed(s, op->kind)) < 0)
                return -1;
    }
    r->p = s - r->b;
    return 0;
}

static PyObject *read_uuid(Reader *r, const Op *op, Py_ssize_t end)
{
    PyObject *raw, *uuid;
    if (left(r, end) < 16) {
        fail_short(r->p, "uuid");
        return NULL;
    }
    if (r->skim && op->entity != ENTITY_TOPIC_ID && !PICKS(r, op)) {
        r->p += 16;
        Py_RETURN_NONE;
    }
    raw = PyBytes_FromStringAndSize((const char *)r->b + r->p, 16);
    if (raw == NULL)
        return NULL;
    uuid = PyObject_CallOneArg(uuid_of, raw);
    Py_DECREF(raw);
    if (uuid != NULL)
        r->p += 16;
    return uuid;
}

/* A length or count, or null (returns 1): -1 if the field may not be null. */
static inline int read_count(Reader *r, const Op *op, Py_ssize_t end, int64_t *out)
{
    if (read_length(r, op, end, out) < 0)
        return -1;
    if (*out >= 0)
        return 0;
    if (op->nullable)
        return 1;
    return fail_invalid(r->p, op->kind == KIND_ARRAY ? "null array in a field that is not nullable"
                                                     : "null in a field that is not nullable");
}

/* A string (UTF-8, strict) or a zero-copy bytes/records view; skimming, only the strings
 * kept are decoded. */
static PyObject *read_sized(Reader *r, const Op *op, Py_ssize_t end)
{
    Py_ssize_t start;
    int64_t length = 0;
    PyObject *text;
    int status = read_count(r, op, end, &length);
    if (status != 0)
        return status < 0 ? NULL : Py_NewRef(Py_None);
    if (op->peek ? length >= left(r, end) : length > left(r, end)) {
        fail_short(r->p, op->kind == KIND_STRING ? "string" : op->kind == KIND_BYTES ? "bytes" : "records");
        return NULL;
    }
    start = r->p;
    r->p = start + (Py_ssize_t)length;
    if (op->kind != KIND_STRING)
        return r->skim && !PICKS(r, op) ? Py_NewRef(Py_None) : slice_view(r, start, r->p);
    if (r->skim && op->entity == ENTITY_NONE && !PICKS(r, op))
        Py_RETURN_NONE;
    if ((text = decode_text(r->b + start, (Py_ssize_t)length)) == NULL)
        r->p = start;
    else if (r->skim && op->entity != ENTITY_NONE && keep(r, op->entity, text) < 0)
        Py_CLEAR(text);
    return text;
}

static PyObject *read_value(Reader *r, const Op *op, Py_ssize_t end, PyObject *counts);

/* Fixed-size elements: all in one go, as the Python interpreter's one unpack. */
static PyObject *read_fixed_elements(Reader *r, const Op *element, int64_t count)
{
    const uint8_t *s = r->b + r->p;
    PyObject *list;
    Py_ssize_t i;
    r->p += (Py_ssize_t)count * element->size;
    if (r->skim)
        Py_RETURN_NONE;
    if ((list = PyList_New((Py_ssize_t)count)) == NULL)
        return NULL;
    for (i = 0; i < (Py_ssize_t)count; i++) {
        PyObject *value = element->kind == KIND_INT32 ? int_of((int32_t)be32(s + i * 4))
                                                      : unpack_fixed(s + i * element->size, element->kind);
        if (value == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, value);
    }
    return list;
}

/* An array: its count checked against the bytes left before any allocation; elements
 * other than fixed-size ones cost the element budget. Skimming, the count of an array of
 * the message's own struct goes to `counts`. */
static PyObject *read_array(Reader *r, const Op *op, Py_ssize_t end, PyObject *counts)
{
    PyObject *list;
    int64_t count = 0, i;
    int status = read_count(r, op, end, &count);
    if (status != 0)
        return status < 0 ? NULL : Py_NewRef(Py_None);
    /* count < 2^35 and min_size <= 2^20: the product cannot overflow */
    if (op->peek ? count * op->min_size >= left(r, end) : count * op->min_size > left(r, end)) {
        fail_invalid(r->p, "array count exceeds the bytes left");
        return NULL;
    }
    if (counts != NULL) {
        PyObject *number = PyLong_FromLongLong(count);
        status = number == NULL ? -1 : PyDict_SetItem(counts, op->name, number);
        Py_XDECREF(number);
        if (status < 0)
            return NULL;
    }
    if (op->element->kind <= KIND_BOOL)
        return read_fixed_elements(r, op->element, count);
    if (count > 0) {
        r->budget -= count;
        if (r->budget < 0) {
            fail_invalid(r->p, "more array elements than the decode budget");
            return NULL;
        }
    }
    if (r->skim) {
        for (i = 0; i < count; i++) {
            PyObject *item = read_value(r, op->element, end, NULL);
            if (item == NULL)
                return NULL;
            Py_DECREF(item);
        }
        Py_RETURN_NONE;
    }
    if ((list = PyList_New((Py_ssize_t)count)) == NULL)  /* unset items are NULL: list_dealloc allows it */
        return NULL;
    for (i = 0; i < count; i++) {
        PyObject *item = read_value(r, op->element, end, NULL);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* A nullable struct has a marker byte before it, 0xFF for null. */
static PyObject *read_struct(Reader *r, const Op *op, Py_ssize_t end)
{
    if (op->framing == FRAMING_MARKER) {
        if (r->p >= end) {
            fail_short(r->p, "struct marker");
            return NULL;
        }
        r->p += 1;
        if (r->b[r->p - 1] == 0xFF)
            Py_RETURN_NONE;
    }
    return decode_struct(r, op->sub, end, NULL);
}

/* interpreter._value: any field but a fixed-size one in a run. */
static PyObject *read_value(Reader *r, const Op *op, Py_ssize_t end, PyObject *counts)
{
    switch (op->kind) {
    case KIND_STRING: case KIND_BYTES: case KIND_RECORDS:
        return read_sized(r, op, end);
    case KIND_STRUCT:
        return read_struct(r, op, end);
    case KIND_ARRAY:
        return read_array(r, op, end, counts);
    case KIND_UUID:
        return read_uuid(r, op, end);
    default:
        return read_fixed(r, op, end);
    }
}

/* ------------------------------------------------------------------------------------
 * Structs and their tagged fields (interpreter._struct, _tagged)
 * ------------------------------------------------------------------------------------ */

/* A new copy of a list or dict default (nested ones too), as copy.deepcopy makes of the
 * defaults that hold only those, strings, numbers and None. */
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

/* A known tagged field ending at `stop`: its value must end there, and a value equal to
 * the default is remembered in _explicit_tags (the encoder then writes it back). */
static int read_known_tag(Reader *r, const Op *op, Py_ssize_t stop, const Program *prog, Fields *f,
                          PyObject *counts)
{
    PyObject *value, *equal;
    int same;
    if (put(f, op->slot, read_value(r, op, stop, counts)) < 0)
        return -1;
    if (r->p != stop)
        return fail_invalid(r->p, "tagged field size mismatch");
    if (r->skim)
        return 0;
    value = f->slot[op->slot] != NULL ? f->slot[op->slot] : prog->values[op->slot];
    Py_INCREF(value);  /* `==` may run Python code */
    equal = PyObject_RichCompare(value, op->deflt, Py_EQ);
    Py_DECREF(value);
    if (equal == NULL)
        return -1;
    same = PyObject_IsTrue(equal);
    Py_DECREF(equal);
    if (same < 0)
        return -1;
    return same ? append_new(&f->explicit_, PyLong_FromLongLong(op->tag)) : 0;
}

/* An unknown tagged field: kept as (tag, view), at most max_unknown_tags of them. */
static int read_unknown_tag(Reader *r, int64_t tag, Py_ssize_t stop, Fields *f)
{
    PyObject *tag_obj, *raw, *pair;
    if (f->nunknown >= max_unknown_tags)
        return fail_invalid(r->p, "too many tagged fields");
    f->nunknown += 1;
    if (r->skim) {
        r->p = stop;
        return 0;
    }
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

/* The tagged-field section, when it is not a 0 byte. */
NOINLINE static int read_tagged(Reader *r, const Program *prog, Py_ssize_t end, Fields *f, PyObject *counts)
{
    int64_t count = 0, i;
    if (read_uvarint(r, end, &count) < 0)
        return -1;
    if (count > left(r, end))
        return fail_invalid(r->p, "tagged field count exceeds the bytes left");
    for (i = 0; i < count; i++) {
        int64_t tag, size;
        Py_ssize_t j;
        int status;
        if (read_uvarint(r, end, &tag) < 0 || read_uvarint(r, end, &size) < 0)
            return -1;
        if (size > left(r, end))
            return fail_short(r->p, "tagged field");
        for (j = 0; j < prog->ntagged && prog->tagged[j].tag != tag; j++)
            ;
        if (j < prog->ntagged)
            status = read_known_tag(r, &prog->tagged[j], r->p + (Py_ssize_t)size, prog, f, counts);
        else
            status = read_unknown_tag(r, tag, r->p + (Py_ssize_t)size, f);
        if (status < 0)
            return -1;
    }
    return 0;
}

/* Tagged fields whose default is a list or a dict get a new one per decode. */
NOINLINE static int put_fresh_defaults(const Program *prog, Fields *f)
{
    Py_ssize_t i;
    for (i = 0; i < prog->nfresh; i++)
        if (put(f, prog->fresh[i]->slot, fresh_copy(prog->fresh[i]->deflt, 0)) < 0)
            return -1;
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
 * _explicit_tags if any. */
static PyObject *build_dict(const Program *prog, Fields *f)
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
    if (dict != NULL && f->unknown != NULL && PyDict_SetItem(dict, unknown_key, f->unknown) < 0)
        Py_CLEAR(dict);
    if (dict != NULL && f->explicit_ != NULL && PyDict_SetItem(dict, explicit_key, f->explicit_) < 0)
        Py_CLEAR(dict);
    return dict;
}

/* skim: the (topic id, topic name) pair of the struct, if both were read. */
static PyObject *skimmed(Reader *r, const Program *prog, Fields *f)
{
    PyObject *id, *topic, *pair;
    if (prog->pair_id < 0)
        Py_RETURN_NONE;
    id = f->slot[prog->pair_id];
    topic = f->slot[prog->pair_topic];
    if (id == NULL || id == Py_None || topic == NULL || topic == Py_None)
        Py_RETURN_NONE;
    if ((pair = PyTuple_Pack(2, id, topic)) == NULL || keep(r, ENTITY_TOPIC_ID, pair) < 0) {
        Py_XDECREF(pair);
        return NULL;
    }
    Py_DECREF(pair);
    Py_RETURN_NONE;
}

/* interpreter._struct: the dict decoding, None skimming. `counts`: found["counts"] for
 * the message's own struct when skimming, else NULL. */
static PyObject *decode_struct(Reader *r, const Program *prog, Py_ssize_t end, PyObject *counts)
{
    Fields f;
    const Op *op, *stop = prog->ops + prog->nops;
    Py_ssize_t i;
    PyObject *result = NULL;
    for (i = 0; i < prog->nkeys; i++)
        f.slot[i] = NULL;
    f.likely = r->skim ? no_likely : prog->values;
    f.unknown = f.explicit_ = NULL;
    f.nunknown = 0;
    for (op = prog->ops; op < stop; op += op->step) {
        if (op->run) {  /* a run of fixed-size fields */
            if (read_run(r, op, end, &f) < 0)
                goto done;
        } else if (put(&f, op->slot, read_value(r, op, end, counts)) < 0) {
            goto done;
        } else if (r->skim && PICKS(r, op)
                   && set_column(r, op, Py_NewRef(f.slot[op->slot] != NULL ? f.slot[op->slot] : Py_None)) < 0) {
            goto done;
        }
    }
    if (prog->flexible) {
        if (prog->nfresh > 0 && !r->skim && put_fresh_defaults(prog, &f) < 0)
            goto done;
        if (r->p < end && r->b[r->p] == 0)  /* no tagged fields: the usual case */
            r->p += 1;
        else if (read_tagged(r, prog, end, &f, counts) < 0)
            goto done;
    }
    result = r->skim ? skimmed(r, prog, &f) : build_dict(prog, &f);
    if (result != NULL && r->skim && prog->emits && r->rows != NULL && emit_row(r) < 0)
        Py_CLEAR(result);
done:
    if (result == NULL || r->skim)  /* else build_dict took them all */
        for (i = 0; i < prog->nkeys; i++)
            Py_XDECREF(f.slot[i]);
    Py_XDECREF(f.unknown);
    Py_XDECREF(f.explicit_);
    return result;
}

/* ------------------------------------------------------------------------------------
 * The decoder object
 * ------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Program *prog;
    PyObject *layout;          /* the layout.Struct it runs */
    PyObject *decode_fallback; /* interpreter.decode for it: calls the C one does not take */
    PyObject *skim_fallback;   /* interpreter.skim for it */
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
 * with 0 <= pos <= end <= len(buf), a list budget, and when skimming a dict `found` of
 * lists. On success `view` holds an export of the buffer (so it can be neither released
 * nor resized while we read it); its layout is checked on that export, never on a
 * memoryview that may be released. */
static int takes(PyObject *const *args, Reader *r, Py_ssize_t *end, Py_buffer *view, PyObject *found,
                 PyObject **counts, Py_ssize_t ncolumns)
{
    int i;
    r->rows = NULL;  /* r->row is set up (and read, and cleared by run) only with rows */
    r->ncolumns = 0;
    if (!PyMemoryView_Check(args[0]) || !position_of(args[1], &r->p) || !position_of(args[2], end)
        || !budget_of(args[3], &r->budget))
        return 0;
    r->skim = found != NULL;
    *counts = NULL;
    if (found != NULL) {
        if (!PyDict_CheckExact(found))
            return 0;
        for (i = 0; i < 5; i++) {
            r->found[i] = PyDict_GetItemWithError(found, found_keys[i]);
            if (r->found[i] == NULL || !PyList_CheckExact(r->found[i])) {
                PyErr_Clear();
                return 0;
            }
        }
        *counts = PyDict_GetItemWithError(found, counts_key);
        if (*counts == NULL || !PyDict_CheckExact(*counts)) {
            PyErr_Clear();
            return 0;
        }
        if (ncolumns > 0) {  /* a picked layout: its rows go to found["rows"] */
            r->rows = PyDict_GetItemWithError(found, rows_key);
            if (r->rows == NULL || !PyList_CheckExact(r->rows)) {
                PyErr_Clear();
                return 0;
            }
            r->ncolumns = ncolumns;
            for (i = 0; i < MAX_COLUMNS; i++)
                r->row[i] = NULL;
        }
    }
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

/* Write the budget back, as the Python interpreter's `k[0] -= count` leaves it, keeping
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

/* Run the struct over args (buf, pos, end, budget): the dict, or None when skimming
 * into `found`; NULL with *taken 0 when the call is not one the C decoder takes. */
static PyObject *run(DecoderObject *d, PyObject *const *args, PyObject *found, int *taken, Py_ssize_t *stop)
{
    Reader r;
    Py_buffer view;
    Py_ssize_t end;
    int64_t start_budget;
    PyObject *result, *counts;
    int i;
    *taken = takes(args, &r, &end, &view, found, &counts, d->prog->ncolumns);
    if (!*taken)
        return NULL;
    start_budget = r.budget;
    result = decode_struct(&r, d->prog, end, counts);
    for (i = 0; r.rows != NULL && i < MAX_COLUMNS; i++)
        Py_CLEAR(r.row[i]);
    PyBuffer_Release(&view);
    if (store_budget(args[3], start_budget, r.budget) < 0)
        Py_CLEAR(result);
    *stop = r.p;
    return result;
}

static PyObject *decoder_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    DecoderObject *d = (DecoderObject *)self;
    PyObject *dict, *result, *position;
    Py_ssize_t stop;
    int taken = 0;
    if (kwnames != NULL || PyVectorcall_NARGS(nargsf) != 4
        || ((dict = run(d, args, NULL, &taken, &stop)) == NULL && !taken))
        return PyObject_Vectorcall(d->decode_fallback, args, nargsf, kwnames);
    if (dict == NULL)
        return NULL;
    result = PyTuple_New(2);
    position = result == NULL ? NULL : PyLong_FromSsize_t(stop);
    if (position == NULL) {
        Py_DECREF(dict);
        Py_XDECREF(result);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, dict);
    PyTuple_SET_ITEM(result, 1, position);
    return result;
}

static PyObject *decoder_skim(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    DecoderObject *d = (DecoderObject *)self;
    PyObject *none;
    Py_ssize_t stop;
    int taken = 0;
    if (nargs != 5 || ((none = run(d, args, args[4], &taken, &stop)) == NULL && !taken))
        return PyObject_Vectorcall(d->skim_fallback, args, nargs, NULL);
    if (none == NULL)
        return NULL;
    Py_DECREF(none);
    return PyLong_FromSsize_t(stop);
}

static void decoder_dealloc(PyObject *self)
{
    DecoderObject *d = (DecoderObject *)self;
    PyObject_GC_UnTrack(self);
    free_program(d->prog);
    Py_XDECREF(d->layout);
    Py_XDECREF(d->decode_fallback);
    Py_XDECREF(d->skim_fallback);
    PyObject_GC_Del(self);
}

/* Only the fallbacks (Python callables) could lead back here. */
static int decoder_traverse(PyObject *self, visitproc visit, void *arg)
{
    DecoderObject *d = (DecoderObject *)self;
    Py_VISIT(d->decode_fallback);
    Py_VISIT(d->skim_fallback);
    return 0;
}

static int decoder_clear(PyObject *self)
{
    DecoderObject *d = (DecoderObject *)self;
    /* keep callables there: a decoder may still be called after a clear */
    Py_SETREF(d->decode_fallback, Py_NewRef(Py_None));
    Py_SETREF(d->skim_fallback, Py_NewRef(Py_None));
    return 0;
}

static PyObject *decoder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *layout, *decode_fallback, *skim_fallback;
    DecoderObject *d;
    static char *keywords[] = {"layout", "decode_fallback", "skim_fallback", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:Decoder", keywords, &layout, &decode_fallback,
                                     &skim_fallback))
        return NULL;
    if (!PyCallable_Check(decode_fallback) || !PyCallable_Check(skim_fallback)) {
        PyErr_SetString(PyExc_TypeError, "the fallbacks must be callable");
        return NULL;
    }
    if (short_ == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "codec._accel.configure() was not called");
        return NULL;
    }
    if ((d = PyObject_GC_New(DecoderObject, type)) == NULL)
        return NULL;
    d->vectorcall = decoder_vectorcall;
    d->layout = Py_NewRef(layout);
    d->decode_fallback = Py_NewRef(decode_fallback);
    d->skim_fallback = Py_NewRef(skim_fallback);
    if ((d->prog = load_program(layout, 0)) == NULL) {
        Py_DECREF(d);
        return NULL;
    }
    PyObject_GC_Track(d);
    return (PyObject *)d;
}

static PyObject *decoder_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<codec._accel.Decoder of %R>", ((DecoderObject *)self)->layout);
}

static PyMethodDef decoder_methods[] = {
    {"skim", (PyCFunction)(void (*)(void))decoder_skim, METH_FASTCALL,
     "skim(buf, pos, end, budget, found) -> pos: codec.interpreter.skim"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "codec._accel.Decoder",
    .tp_basicsize = sizeof(DecoderObject),
    .tp_dealloc = decoder_dealloc,
    .tp_vectorcall_offset = offsetof(DecoderObject, vectorcall),
    .tp_repr = decoder_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Decoder(layout, decode_fallback, skim_fallback): a layout.Struct run in C;\n"
              "decoder(buf, pos, end, budget) -> (dict, pos) is codec.interpreter.decode.",
    .tp_traverse = decoder_traverse,
    .tp_clear = decoder_clear,
    .tp_methods = decoder_methods,
    .tp_new = decoder_new,
};

/* ------------------------------------------------------------------------------------
 * Collecting entities from a decoded body: codec/entities.py's collector
 *
 * Collector(node) loads an entities._Node tree (leaves: (key, category, holds a list);
 * children: (key, is an array, node)) and runs it as entities._collect runs it:
 * collector(body) -> {"topics": [...], "groups": [...], "transactional_ids": [...],
 * "errors": [...]}, each list its values in first-seen order, a list of more than one
 * value made distinct as dict.fromkeys does. A value's key is read as `value.get(key)`
 * reads it (a dict's entry, else its `get` method called), truth as `if item:` tests it,
 * an array walked as `for inner in item` walks it: the Python walk's results on any
 * body, and an exception of the same class where it raises one (a list leaf that is not
 * iterable: the message differs). tests/codec/test_entities_accel.py holds the two to
 * the same output on decoded bodies of every message and version.
 * The tree is walked as deep as it was loaded (at most MAX_DEPTH), never deeper.
 * ------------------------------------------------------------------------------------ */

#define N_FOUND 4  /* topics, groups, transactional ids, errors: found_keys' first four */
#define FOUND_ERRORS 3

typedef struct CNode CNode;
typedef struct { PyObject *key; int category, is_list; } CLeaf;
typedef struct { PyObject *key; int is_array; CNode *node; } CChild;
struct CNode {
    Py_ssize_t nleaves, nchildren;
    CLeaf *leaves;
    CChild *children;
};

static void free_cnode(CNode *n)
{
    Py_ssize_t i;
    if (n == NULL)
        return;
    for (i = 0; n->leaves != NULL && i < n->nleaves; i++)
        Py_XDECREF(n->leaves[i].key);
    for (i = 0; n->children != NULL && i < n->nchildren; i++) {
        Py_XDECREF(n->children[i].key);
        free_cnode(n->children[i].node);
    }
    PyMem_Free(n->leaves);
    PyMem_Free(n->children);
    PyMem_Free(n);
}

/* A tuple attribute's entries, each a tuple of 3. */
static PyObject *triples(PyObject *node, const char *name)
{
    PyObject *items = tuple_attr(node, name);
    Py_ssize_t i;
    for (i = 0; items != NULL && i < PyTuple_GET_SIZE(items); i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3 || !PyUnicode_Check(PyTuple_GET_ITEM(item, 0))) {
            PyErr_Format(PyExc_TypeError, "entities node %s: (key, ..., ...) tuples", name);
            Py_CLEAR(items);
        }
    }
    return items;
}

static CNode *load_cnode(PyObject *node, int depth)
{
    PyObject *leaves = NULL, *children = NULL, *item;
    CNode *n = NULL;
    Py_ssize_t i;
    int k, flag;
    if (depth >= MAX_DEPTH) {
        PyErr_SetString(PyExc_ValueError, "entities node nested too deep");
        return NULL;
    }
    if ((leaves = triples(node, "leaves")) == NULL || (children = triples(node, "children")) == NULL
        || (n = calloc_or_raise(1, sizeof *n)) == NULL)
        goto fail;
    n->nleaves = PyTuple_GET_SIZE(leaves);
    n->nchildren = PyTuple_GET_SIZE(children);
    if ((n->nleaves && (n->leaves = calloc_or_raise(n->nleaves, sizeof *n->leaves)) == NULL)
        || (n->nchildren && (n->children = calloc_or_raise(n->nchildren, sizeof *n->children)) == NULL))
        goto fail;
    for (i = 0; i < n->nleaves; i++) {
        item = PyTuple_GET_ITEM(leaves, i);
        n->leaves[i].key = Py_NewRef(PyTuple_GET_ITEM(item, 0));
        PyUnicode_InternInPlace(&n->leaves[i].key);
        n->leaves[i].category = -1;
        for (k = 0; k < N_FOUND; k++) {
            int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(item, 1), found_keys[k], Py_EQ);
            if (same < 0)
                goto fail;
            if (same)
                n->leaves[i].category = k;
        }
        if (n->leaves[i].category < 0 || (flag = PyObject_IsTrue(PyTuple_GET_ITEM(item, 2))) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "entities leaf of an unknown category");
            goto fail;
        }
        n->leaves[i].is_list = flag;
    }
    for (i = 0; i < n->nchildren; i++) {
        item = PyTuple_GET_ITEM(children, i);
        n->children[i].key = Py_NewRef(PyTuple_GET_ITEM(item, 0));
        PyUnicode_InternInPlace(&n->children[i].key);
        if ((flag = PyObject_IsTrue(PyTuple_GET_ITEM(item, 1))) < 0
            || (n->children[i].node = load_cnode(PyTuple_GET_ITEM(item, 2), depth + 1)) == NULL)
            goto fail;
        n->children[i].is_array = flag;
    }
    Py_DECREF(leaves);
    Py_DECREF(children);
    return n;
fail:
    Py_XDECREF(leaves);
    Py_XDECREF(children);
    free_cnode(n);
    return NULL;
}

/* value.get(key), a new reference (None when absent), or NULL with an exception. */
static PyObject *get_of(PyObject *value, PyObject *key)
{
    PyObject *item;
    if (PyDict_CheckExact(value)) {
        item = PyDict_GetItemWithError(value, key);
        if (item == NULL && PyErr_Occurred())
            return NULL;
        return Py_NewRef(item == NULL ? Py_None : item);
    }
    return PyObject_CallMethod(value, "get", "O", key);
}

static int walk_cnode(const CNode *n, PyObject *value, PyObject **lists)
{
    Py_ssize_t i;
    PyObject *item, *iter, *inner;
    int truth, status = 0;
    for (i = 0; status == 0 && i < n->nleaves; i++) {
        const CLeaf *leaf = &n->leaves[i];
        PyObject *list = lists[leaf->category];
        if ((item = get_of(value, leaf->key)) == NULL)
            return -1;
        if (leaf->is_list || leaf->category == FOUND_ERRORS) {
            truth = PyObject_IsTrue(item);
            if (truth < 0)
                status = -1;
            else if (truth && leaf->is_list)
                status = PyList_SetSlice(list, PyList_GET_SIZE(list), PyList_GET_SIZE(list), item);
            else if (truth)
                status = PyList_Append(list, item);
        } else if (item != Py_None) {
            status = PyList_Append(list, item);
        }
        Py_DECREF(item);
    }
    for (i = 0; status == 0 && i < n->nchildren; i++) {
        const CChild *child = &n->children[i];
        if ((item = get_of(value, child->key)) == NULL)
            return -1;
        truth = PyObject_IsTrue(item);
        if (truth < 0) {
            status = -1;
        } else if (truth && !child->is_array) {
            status = walk_cnode(child->node, item, lists);
        } else if (truth && PyList_CheckExact(item)) {
            Py_ssize_t j;
            /* the list may change size under a walk of Python code: re-read its size */
            for (j = 0; status == 0 && j < PyList_GET_SIZE(item); j++) {
                inner = Py_NewRef(PyList_GET_ITEM(item, j));
                status = walk_cnode(child->node, inner, lists);
                Py_DECREF(inner);
            }
        } else if (truth) {
            if ((iter = PyObject_GetIter(item)) == NULL) {
                status = -1;
            } else {
                while (status == 0 && (inner = PyIter_Next(iter)) != NULL) {
                    status = walk_cnode(child->node, inner, lists);
                    Py_DECREF(inner);
                }
                if (status == 0 && PyErr_Occurred())
                    status = -1;
                Py_DECREF(iter);
            }
        }
        Py_DECREF(item);
    }
    return status;
}

/* list(dict.fromkeys(list)) */
static PyObject *distinct(PyObject *list)
{
    PyObject *seen = PyDict_New(), *out = NULL;
    Py_ssize_t i;
    if (seen == NULL)
        return NULL;
    for (i = 0; i < PyList_GET_SIZE(list); i++)
        if (PyDict_SetItem(seen, PyList_GET_ITEM(list, i), Py_None) < 0)
            goto done;
    out = PyDict_Keys(seen);
done:
    Py_DECREF(seen);
    return out;
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    CNode *root;
    PyObject *node;  /* the entities._Node it runs */
} CollectorObject;

static PyObject *collector_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    CollectorObject *c = (CollectorObject *)self;
    PyObject *lists[N_FOUND] = {NULL}, *found = NULL, *unique;
    int k;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "collector(body)");
        return NULL;
    }
    for (k = 0; k < N_FOUND; k++)
        if ((lists[k] = PyList_New(0)) == NULL)
            goto done;
    if (walk_cnode(c->root, args[0], lists) < 0)
        goto done;
    for (k = 0; k < N_FOUND; k++)
        if (PyList_GET_SIZE(lists[k]) > 1) {
            if ((unique = distinct(lists[k])) == NULL)
                goto done;
            Py_SETREF(lists[k], unique);
        }
    if ((found = PyDict_New()) == NULL)
        goto done;
    for (k = 0; k < N_FOUND; k++)
        if (PyDict_SetItem(found, found_keys[k], lists[k]) < 0) {
            Py_CLEAR(found);
            goto done;
        }
done:
    for (k = 0; k < N_FOUND; k++)
        Py_XDECREF(lists[k]);
    return found;
}

static void collector_dealloc(PyObject *self)
{
    CollectorObject *c = (CollectorObject *)self;
    free_cnode(c->root);
    Py_XDECREF(c->node);
    PyObject_Free(self);
}

static PyObject *collector_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *node;
    CollectorObject *c;
    static char *keywords[] = {"node", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Collector", keywords, &node))
        return NULL;
    if (found_keys[0] == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "codec._accel.configure() was not called");
        return NULL;
    }
    if ((c = PyObject_New(CollectorObject, type)) == NULL)
        return NULL;
    c->vectorcall = collector_vectorcall;
    c->node = Py_NewRef(node);
    if ((c->root = load_cnode(node, 0)) == NULL) {
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

static PyObject *collector_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<codec._accel.Collector of %R>", ((CollectorObject *)self)->node);
}

static PyTypeObject CollectorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "codec._accel.Collector",
    .tp_basicsize = sizeof(CollectorObject),
    .tp_dealloc = collector_dealloc,
    .tp_vectorcall_offset = offsetof(CollectorObject, vectorcall),
    .tp_repr = collector_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Collector(node): an entities._Node tree run in C;\n"
              "collector(body) -> {category: distinct values} is codec.entities' collector.",
    .tp_new = collector_new,
};

/* ------------------------------------------------------------------------------------
 * Record batch headers: codec/records/stats.py's summarize
 *
 * summarize_records(buf, allow_partial_tail, max_bytes) walks the entries of a records
 * field as codec/records/framing.py's iter_batches does (v2 batches, and legacy magic
 * 0/1 messages) and counts each header as stats.py's add_batch does, without CRC checks
 * (verify_crc=True stays in Python): it returns the RecordStats that summarize returns,
 * or raises the DecodeError it raises (the records error factory's, same message and
 * offset), checking the same bounds in the same order. It returns NotImplemented for a
 * call it does not take, and summarize then runs the Python path: a buffer that is not
 * contiguous bytes, a max_bytes that is not an int of 64 bits, an offset past int64
 * (base offset plus last delta, which Python's ints carry on).
 *
 * The header layouts are codec/records/batch.py's and legacy.py's struct formats:
 * RECORD_LAYOUT exports the offsets and widths read here, and codec/accel.py refuses an
 * extension whose RECORD_LAYOUT is not the one the Python modules describe.
 *
 * Memory safety: an entry is read only once its length field says it lies inside the
 * buffer (size - pos - LOG_OVERHEAD >= length, compared before adding), and a field only
 * when the entry is long enough to hold it (v2: length >= V2_HEADER_SIZE - LOG_OVERHEAD;
 * legacy: length >= LEGACY_MIN_SIZE[magic], which covers the timestamp of magic 1).
 * The buffer is held (PyObject_GetBuffer) for the whole walk, and released before any
 * Python code runs.
 * ------------------------------------------------------------------------------------ */

#define LOG_OVERHEAD 12           /* offset int64, length int32 */
#define MAGIC_OFFSET 16
#define PREFIX (MAGIC_OFFSET + 1) /* up to the magic byte: the shortest entry */
#define V2_HEADER_SIZE 61
#define MIN_RECORD_SIZE 7         /* the shortest v2 record */
#define N_CODECS 5                /* batch.py's COMPRESSION_NAMES */
#define LEGACY_CODECS 4           /* none, gzip, snappy, lz4: zstd came with v2 */
#define ATTR_TIMESTAMP_TYPE 0x08
#define ATTR_TRANSACTIONAL 0x10
#define ATTR_CONTROL 0x20
#define ATTR_DELETE_HORIZON 0x40

/* v2 header fields: offset into the entry, struct format character (batch.py's _V2). */
#define V2_BASE_OFFSET 0
#define V2_BATCH_LENGTH 8
#define V2_PARTITION_LEADER_EPOCH 12
#define V2_MAGIC 16
#define V2_CRC 17
#define V2_ATTRIBUTES 21
#define V2_LAST_OFFSET_DELTA 23
#define V2_BASE_TIMESTAMP 27
#define V2_MAX_TIMESTAMP 35
#define V2_PRODUCER_ID 43
#define V2_PRODUCER_EPOCH 51
#define V2_BASE_SEQUENCE 53
#define V2_RECORD_COUNT 57
/* legacy message fields (legacy.py's _V0 and _V1) */
#define LEGACY_OFFSET 0
#define LEGACY_SIZE 8
#define LEGACY_CRC 12
#define LEGACY_MAGIC 16
#define LEGACY_ATTRIBUTES 17
#define LEGACY_TIMESTAMP 18       /* magic 1 only */
#define LEGACY_MIN_SIZE_0 14     /* crc to value length, by magic */
#define LEGACY_MIN_SIZE_1 22
static const int64_t legacy_min_size[2] = {LEGACY_MIN_SIZE_0, LEGACY_MIN_SIZE_1};

/* What codec/accel.py gives once: RecordStats, the records error factory, the names. */
static PyObject *stats_class, *records_error, *compression_names[N_CODECS];
#define N_STATS 13
/* Where each RecordStats field lives in an instance (its __slots__ member), when the
 * class is a plain slotted one (see configure_records): then a RecordStats is made by
 * allocating it and filling its slots, as its dataclass __init__ would, without the
 * call of a Python __init__ (bench/PROFILE.md); else (0) the class is called. */
static Py_ssize_t stats_offsets[N_STATS];
static int stats_direct;

static inline uint64_t be64(const uint8_t *s)
{
    return (uint64_t)be32(s) << 32 | be32(s + 4);
}

typedef struct {
    int64_t batches, records, unknown_count_batches, bytes, control_batches;
    int64_t producer_id, producer_epoch, min_timestamp, max_timestamp, next_offset;
    int transactional;
    int ncodecs;
    int codecs[N_CODECS];         /* the compressions seen, in first-seen order */
} Totals;

/* A failure: DecodeError(message, offset) from the factory, or NotImplemented (0). */
typedef struct {
    char message[160];
    int64_t offset;
    int give_up;                  /* a call not taken: the Python path runs */
} Failure;

#define FAIL(f, pos, ...) (snprintf((f)->message, sizeof (f)->message, __VA_ARGS__), (f)->offset = (pos), -1)

/* Python's // for a positive divisor. */
static inline int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && a < 0);
}

static void add_codec(Totals *t, int codec)
{
    int i;
    for (i = 0; i < t->ncodecs; i++)
        if (t->codecs[i] == codec)
            return;
    t->codecs[t->ncodecs++] = codec;
}

/* add_batch's step for what the two header kinds have in common. */
static int add_entry(Totals *t, Failure *f, int64_t length, int magic, int attributes, int64_t base_offset,
                     int64_t last_delta, int64_t base_ts, int64_t max_ts, int64_t count)
{
    int use_max = magic >= 1 && (attributes & ATTR_TIMESTAMP_TYPE);
    /* A compressed legacy wrapper states no last delta (-1): its own offset is its last. */
    int64_t first, step = (last_delta > 0 ? last_delta : 0) + 1;
    if (magic >= 2)
        use_max = use_max || (attributes & ATTR_DELETE_HORIZON);
    /* One past the last offset: Python's ints never overflow; past int64 Python runs. */
    if (base_offset > INT64_MAX - step) {
        f->give_up = 1;
        return -1;
    }
    t->batches += 1;
    t->bytes += length + LOG_OVERHEAD;
    add_codec(t, attributes & 0x07);
    if (count < 0)
        t->unknown_count_batches += 1;
    else
        t->records += count;
    if (magic >= 2 && (attributes & ATTR_CONTROL))
        t->control_batches += 1;
    if (magic >= 2 && (attributes & ATTR_TRANSACTIONAL))
        t->transactional = 1;
    first = use_max ? max_ts : base_ts;
    if (first >= 0 && (t->min_timestamp < 0 || first < t->min_timestamp))
        t->min_timestamp = first;
    if (max_ts >= 0 && max_ts > t->max_timestamp)
        t->max_timestamp = max_ts;
    if (base_offset + step > t->next_offset)
        t->next_offset = base_offset + step;
    return 0;
}

/* batch.py's read_v2_header and _check_v2, then add_batch. */
static int add_v2(Totals *t, Failure *f, const uint8_t *s, int64_t pos, int64_t length, int64_t max_bytes)
{
    int attributes, codec;
    int64_t count, room, producer_id;
    if (length < V2_HEADER_SIZE - LOG_OVERHEAD)
        return FAIL(f, pos, "record batch length %lld shorter than its header", (long long)length);
    attributes = (int16_t)be16(s + V2_ATTRIBUTES);
    count = (int32_t)be32(s + V2_RECORD_COUNT);
    codec = attributes & 0x07;
    if (codec >= N_CODECS)
        return FAIL(f, pos, "unknown compression id %d", codec);
    if (count < 0)
        return FAIL(f, pos, "negative record count %lld", (long long)count);
    room = codec == 0 ? length + LOG_OVERHEAD - V2_HEADER_SIZE : max_bytes;
    if (count > floor_div(room, MIN_RECORD_SIZE))
        return FAIL(f, pos, "record count %lld does not fit in %lld bytes", (long long)count, (long long)room);
    producer_id = (int64_t)be64(s + V2_PRODUCER_ID);
    if (t->producer_id == -1 && producer_id != -1) {
        t->producer_id = producer_id;
        t->producer_epoch = (int16_t)be16(s + V2_PRODUCER_EPOCH);
    }
    return add_entry(t, f, length, 2, attributes, (int64_t)be64(s + V2_BASE_OFFSET),
                     (int32_t)be32(s + V2_LAST_OFFSET_DELTA), (int64_t)be64(s + V2_BASE_TIMESTAMP),
                     (int64_t)be64(s + V2_MAX_TIMESTAMP), count);
}

/* legacy.py's read_legacy_header, then add_batch. */
static int add_legacy(Totals *t, Failure *f, const uint8_t *s, int64_t pos, int64_t length)
{
    int magic = s[LEGACY_MAGIC], attributes, compressed;
    int64_t timestamp;
    if (length < legacy_min_size[0])
        return FAIL(f, pos, "legacy message size %lld too small", (long long)length);
    if (magic > 1 || length < legacy_min_size[magic])
        return FAIL(f, pos, "legacy message of magic %d and size %lld", magic, (long long)length);
    attributes = (int8_t)s[LEGACY_ATTRIBUTES];
    if ((attributes & 0x07) >= LEGACY_CODECS)
        return FAIL(f, pos, "legacy message with compression id %d", attributes & 0x07);
    timestamp = magic == 0 ? -1 : (int64_t)be64(s + LEGACY_TIMESTAMP);
    /* A compressed wrapper's count and last offset are unknown until decompressed. */
    compressed = (attributes & 0x07) != 0;
    return add_entry(t, f, length, magic, attributes, (int64_t)be64(s + LEGACY_OFFSET), compressed ? -1 : 0,
                     timestamp, timestamp, compressed ? -1 : 1);
}

/* framing.py's iter_batches over b[0:size], each entry counted in t. */
static int walk_records(Totals *t, Failure *f, const uint8_t *b, int64_t size, int partial_tail, int64_t max_bytes)
{
    int64_t pos = 0, length;
    int magic, status;
    while (pos < size) {
        if (size - pos < LOG_OVERHEAD)
            return partial_tail ? 0 : FAIL(f, pos, "records end inside a batch");
        length = (int32_t)be32(b + pos + V2_BATCH_LENGTH);
        /* No entry is shorter than magic plus what precedes it: corruption, never a cut. */
        if (length < PREFIX - LOG_OVERHEAD)
            return FAIL(f, pos, "record batch length %lld invalid", (long long)length);
        if (size - pos - LOG_OVERHEAD < length)
            return partial_tail ? 0 : FAIL(f, pos, "records end inside a batch");
        magic = b[pos + MAGIC_OFFSET];
        if (magic == 2)
            status = add_v2(t, f, b + pos, pos, length, max_bytes);
        else if (magic < 2)
            status = add_legacy(t, f, b + pos, pos, length);
        else
            status = FAIL(f, pos, "unknown record magic %d", magic);
        if (status < 0)
            return -1;
        pos += LOG_OVERHEAD + length;
    }
    return 0;
}

static COLD PyObject *raise_records_error(const Failure *f)
{
    PyObject *error = PyObject_CallFunction(records_error, "sL", f->message, (long long)f->offset);
    if (error != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_DECREF(error);
    }
    return NULL;
}

static inline PyObject *int_of_ll(int64_t value)
{
    if (value >= SMALL_MIN && value <= SMALL_MAX)
        return Py_NewRef(small_ints[value - SMALL_MIN]);
    return PyLong_FromLongLong(value);
}

static PyObject *stats_of(const Totals *t, int64_t size)
{
    PyObject *args[N_STATS] = {NULL}, *result = NULL, *codecs;
    int64_t ints[N_STATS] = {
        t->batches, t->records, t->unknown_count_batches, t->bytes, size - t->bytes, 0,
        t->producer_id, t->producer_epoch, 0, t->control_batches, t->min_timestamp, t->max_timestamp, t->next_offset,
    };
    int i, ok = 1;
    if ((codecs = PySet_New(NULL)) == NULL)
        return NULL;
    for (i = 0; i < t->ncodecs; i++)
        if (PySet_Add(codecs, compression_names[t->codecs[i]]) < 0)
            ok = 0;
    for (i = 0; ok && i < N_STATS; i++) {
        if (i == 5)
            args[i] = Py_NewRef(codecs);
        else if (i == 8)
            args[i] = PyBool_FromLong(t->transactional);
        else if ((args[i] = int_of_ll(ints[i])) == NULL)
            ok = 0;
    }
    if (ok && stats_direct) {
        PyTypeObject *type = (PyTypeObject *)stats_class;
        if ((result = type->tp_alloc(type, 0)) != NULL)
            for (i = 0; i < N_STATS; i++) {  /* the slots take the references */
                *(PyObject **)((char *)result + stats_offsets[i]) = args[i];
                args[i] = NULL;
            }
    } else if (ok) {
        result = PyObject_Vectorcall(stats_class, args, N_STATS, NULL);
    }
    for (i = 0; i < N_STATS; i++)
        Py_XDECREF(args[i]);
    Py_DECREF(codecs);
    return result;
}

/* summarize_records(buf, allow_partial_tail, max_bytes) -> RecordStats | NotImplemented */
static PyObject *summarize_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t size;
    Totals t = {0};
    Failure f = {{0}, 0, 0};
    long long max_bytes;
    int overflow, partial_tail, status;
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "summarize_records(buf, allow_partial_tail, max_bytes)");
        return NULL;
    }
    if (stats_class == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "codec._accel.configure_records was not called");
        return NULL;
    }
    if ((partial_tail = PyObject_IsTrue(args[1])) < 0)
        return NULL;
    if (!PyLong_CheckExact(args[2]))
        Py_RETURN_NOTIMPLEMENTED;
    max_bytes = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (overflow || (max_bytes == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();  /* not contiguous bytes: the Python path says what is wrong */
        Py_RETURN_NOTIMPLEMENTED;
    }
    t.producer_id = t.producer_epoch = t.min_timestamp = t.max_timestamp = t.next_offset = -1;
    size = view.len;
    status = walk_records(&t, &f, (const uint8_t *)view.buf, size, partial_tail, max_bytes);
    PyBuffer_Release(&view);
    if (status < 0)
        return f.give_up ? Py_NewRef(Py_NotImplemented) : raise_records_error(&f);
    return stats_of(&t, size);
}

/* RECORD_STATS_FIELDS: the order stats_of passes RecordStats its fields in. */
static PyObject *record_stats_fields(void)
{
    return Py_BuildValue("(sssssssssssss)", "batches", "records", "unknown_count_batches", "bytes",
                         "truncated_bytes", "compressions", "producer_id", "producer_epoch", "transactional",
                         "control_batches", "min_timestamp", "max_timestamp", "next_offset");
}

/* 1 when a RecordStats can be made by filling its slots: `direct` (codec/accel.py found
 * the class's __new__ object's own and no __post_init__: its __init__ only assigns),
 * a heap type whose instances are made by the generic allocator, and every field a
 * __slots__ member holding an object (its offset then stored); 0 otherwise. */
static int direct_stats(PyObject *cls, int direct)
{
    PyObject *fields, *descr;
    PyTypeObject *type = (PyTypeObject *)cls;
    int i, ok = direct && PyType_Check(cls) && type->tp_alloc == PyType_GenericAlloc
                && (type->tp_flags & Py_TPFLAGS_HEAPTYPE);
    if (!ok)
        return 0;
    if ((fields = record_stats_fields()) == NULL)
        return -1;
    for (i = 0; ok && i < N_STATS; i++) {
        if ((descr = PyObject_GetAttr(cls, PyTuple_GET_ITEM(fields, i))) == NULL) {
            Py_DECREF(fields);
            return -1;
        }
        if (Py_TYPE(descr) == &PyMemberDescr_Type) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            ok = member->type == T_OBJECT_EX && !(member->flags & READONLY) && member->offset > 0
                 && (size_t)member->offset + sizeof(PyObject *) <= (size_t)type->tp_basicsize;
            stats_offsets[i] = member->offset;
        } else {
            ok = 0;
        }
        Py_DECREF(descr);
    }
    Py_DECREF(fields);
    return ok;
}

/* configure_records(RecordStats, error, compression_names, direct): codec/records' own, once. */
static PyObject *configure_records(PyObject *module, PyObject *args)
{
    PyObject *cls, *error, *names;
    Py_ssize_t i;
    int direct;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOO!p:configure_records", &cls, &error, &PyTuple_Type, &names, &direct))
        return NULL;
    if (!PyCallable_Check(cls) || !PyCallable_Check(error) || PyTuple_GET_SIZE(names) != N_CODECS) {
        PyErr_SetString(PyExc_TypeError, "configure_records(RecordStats, error, five compression names)");
        return NULL;
    }
    for (i = 0; i < N_CODECS; i++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_TypeError, "compression names are str");
            return NULL;
        }
    for (i = 0; i < N_CODECS; i++)
        Py_XSETREF(compression_names[i], Py_NewRef(PyTuple_GET_ITEM(names, i)));
    Py_XSETREF(records_error, Py_NewRef(error));
    Py_XSETREF(stats_class, Py_NewRef(cls));
    if ((stats_direct = direct_stats(cls, direct)) < 0)
        return NULL;
    return PyBool_FromLong(stats_direct);  /* whether it fills slots itself */
}

/* RECORD_LAYOUT: {name: (offset, struct format character)} of the fields read above and
 * {name: value} of the constants, as codec/records describes them (see codec/accel.py). */
static PyObject *record_layout(void)
{
    static const struct { const char *name; int offset; const char *format; } fields[] = {
        {"v2.base_offset", V2_BASE_OFFSET, "q"},
        {"v2.batch_length", V2_BATCH_LENGTH, "i"},
        {"v2.partition_leader_epoch", V2_PARTITION_LEADER_EPOCH, "i"},
        {"v2.magic", V2_MAGIC, "b"},
        {"v2.crc", V2_CRC, "I"},
        {"v2.attributes", V2_ATTRIBUTES, "h"},
        {"v2.last_offset_delta", V2_LAST_OFFSET_DELTA, "i"},
        {"v2.base_timestamp", V2_BASE_TIMESTAMP, "q"},
        {"v2.max_timestamp", V2_MAX_TIMESTAMP, "q"},
        {"v2.producer_id", V2_PRODUCER_ID, "q"},
        {"v2.producer_epoch", V2_PRODUCER_EPOCH, "h"},
        {"v2.base_sequence", V2_BASE_SEQUENCE, "i"},
        {"v2.record_count", V2_RECORD_COUNT, "i"},
        {"legacy.offset", LEGACY_OFFSET, "q"},
        {"legacy.size", LEGACY_SIZE, "i"},
        {"legacy.crc", LEGACY_CRC, "I"},
        {"legacy.magic", LEGACY_MAGIC, "b"},
        {"legacy.attributes", LEGACY_ATTRIBUTES, "b"},
        {"legacy.timestamp", LEGACY_TIMESTAMP, "q"},
    };
    static const struct { const char *name; long value; } constants[] = {
        {"LOG_OVERHEAD", LOG_OVERHEAD},
        {"MAGIC_OFFSET", MAGIC_OFFSET},
        {"V2_HEADER_SIZE", V2_HEADER_SIZE},
        {"MIN_RECORD_SIZE", MIN_RECORD_SIZE},
        {"COMPRESSIONS", N_CODECS},
        {"LEGACY_COMPRESSIONS", LEGACY_CODECS},
        {"LEGACY_MIN_SIZE_0", LEGACY_MIN_SIZE_0},
        {"LEGACY_MIN_SIZE_1", LEGACY_MIN_SIZE_1},
        {"TIMESTAMP_TYPE", ATTR_TIMESTAMP_TYPE},
        {"TRANSACTIONAL", ATTR_TRANSACTIONAL},
        {"CONTROL", ATTR_CONTROL},
        {"DELETE_HORIZON", ATTR_DELETE_HORIZON},
    };
    PyObject *table = PyDict_New(), *value;
    size_t i;
    int status = table == NULL ? -1 : 0;
    for (i = 0; status == 0 && i < sizeof fields / sizeof fields[0]; i++) {
        value = Py_BuildValue("(is)", fields[i].offset, fields[i].format);
        status = value == NULL ? -1 : PyDict_SetItemString(table, fields[i].name, value);
        Py_XDECREF(value);
    }
    for (i = 0; status == 0 && i < sizeof constants / sizeof constants[0]; i++) {
        value = PyLong_FromLong(constants[i].value);
        status = value == NULL ? -1 : PyDict_SetItemString(table, constants[i].name, value);
        Py_XDECREF(value);
    }
    if (status < 0)
        Py_CLEAR(table);
    return table;
}

/* configure(short, invalid, uuid_of, max_unknown_tags): codec.wire's, once. */
static PyObject *configure(PyObject *module, PyObject *args)
{
    static const char *const keys[5] = {"topics", "groups", "transactional_ids", "errors", "topic_ids"};
    PyObject *s, *i, *u;
    Py_ssize_t n, k;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOOn:configure", &s, &i, &u, &n))
        return NULL;
    if (!PyCallable_Check(s) || !PyCallable_Check(i) || !PyCallable_Check(u) || n < 1) {
        PyErr_SetString(PyExc_TypeError, "configure(short, invalid, uuid_of, max_unknown_tags)");
        return NULL;
    }
    Py_XSETREF(short_, Py_NewRef(s));
    Py_XSETREF(invalid, Py_NewRef(i));
    Py_XSETREF(uuid_of, Py_NewRef(u));
    max_unknown_tags = n;
    for (k = 0; k < 5; k++)
        if (found_keys[k] == NULL && (found_keys[k] = PyUnicode_InternFromString(keys[k])) == NULL)
            return NULL;
    if ((unknown_key == NULL && (unknown_key = PyUnicode_InternFromString("_unknown_tags")) == NULL)
        || (explicit_key == NULL && (explicit_key = PyUnicode_InternFromString("_explicit_tags")) == NULL)
        || (counts_key == NULL && (counts_key = PyUnicode_InternFromString("counts")) == NULL)
        || (rows_key == NULL && (rows_key = PyUnicode_InternFromString("rows")) == NULL))
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(short, invalid, uuid_of, max_unknown_tags): codec.wire's, before any Decoder."},
    {"configure_records", configure_records, METH_VARARGS,
     "configure_records(RecordStats, error, compression_names, direct): codec.records', before summarize_records."},
    {"summarize_records", (PyCFunction)(void (*)(void))summarize_records, METH_FASTCALL,
     "summarize_records(buf, allow_partial_tail, max_bytes) -> RecordStats | NotImplemented: "
     "codec.records.stats.summarize without CRC checks."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef accel_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "codec._accel",
    .m_doc = "The layout description run in C: see codec/_accel.c and codec/accel.py.",
    .m_size = -1,
    .m_methods = module_methods,
};

/* NUMBERS: {enum name: {member name: number}} as this build has them (kinds.h). */
static PyObject *numbers(void)
{
    PyObject *table = PyDict_New(), *members, *number;
    int i, status = 0;
    for (i = 0; table != NULL && status == 0 && kinds_numbers[i].type != NULL; i++) {
        members = PyDict_GetItemString(table, kinds_numbers[i].type);
        if (members == NULL) {
            if ((members = PyDict_New()) == NULL || PyDict_SetItemString(table, kinds_numbers[i].type, members) < 0)
                status = -1;
            Py_XDECREF(members);  /* the table holds it */
        }
        number = status < 0 ? NULL : PyLong_FromLong(kinds_numbers[i].value);
        status = number == NULL ? -1 : PyDict_SetItemString(members, kinds_numbers[i].name, number);
        Py_XDECREF(number);
    }
    if (status < 0)
        Py_CLEAR(table);
    return table;
}

PyMODINIT_FUNC PyInit__accel(void)
{
    PyObject *module, *table, *layout, *fields;
    long i;
    for (i = SMALL_MIN; i <= SMALL_MAX; i++)
        if (small_ints[i - SMALL_MIN] == NULL && (small_ints[i - SMALL_MIN] = PyLong_FromLong(i)) == NULL)
            return NULL;
    if (PyType_Ready(&DecoderType) < 0 || PyType_Ready(&CollectorType) < 0
        || (module = PyModule_Create(&accel_module)) == NULL)
        return NULL;
    table = numbers();
    layout = record_layout();
    fields = record_stats_fields();
    if (table == NULL || layout == NULL || fields == NULL || PyModule_AddObjectRef(module, "NUMBERS", table) < 0
        || PyModule_AddObjectRef(module, "RECORD_LAYOUT", layout) < 0
        || PyModule_AddObjectRef(module, "RECORD_STATS_FIELDS", fields) < 0
        || PyModule_AddObjectRef(module, "Decoder", (PyObject *)&DecoderType) < 0
        || PyModule_AddObjectRef(module, "Collector", (PyObject *)&CollectorType) < 0
        || PyModule_AddIntConstant(module, "DIRECT_DICT", DIRECT_DICT) < 0) {
        Py_XDECREF(table);
        Py_XDECREF(layout);
        Py_XDECREF(fields);
        Py_DECREF(module);
        return NULL;
    }
    Py_DECREF(table);
    Py_DECREF(layout);
    Py_DECREF(fields);
    return module;
}
