/* proxy._steady: a kafkalens connection's steady state, in C.
 *
 * CONTRACT. One call per read per direction: a connection's `data_received` (client to
 * broker) is Core.feed_request and its broker side's is Core.feed_response (see
 * proxy/steady.py, proxy/forward/connection.py). A call takes a read in C only when it is
 * whole frames on a connection in its steady state (broker connected, nothing paused or
 * draining, no SASL token phase, both splitters at a frame boundary), each frame a
 * request (or the answer to the oldest ones, in order) of an api the plan lets it take.
 * It then does the Python path's framing, exchange and write, in the same order and to
 * the same objects: each request becomes a `Pending` (proxy/hooks.py) on the exchange's
 * queue before the read is written on (so before its answer can come), each answer takes
 * its request off the queue, and the read is written to the other side as it came (an
 * ApiVersions answer rewritten as its memoised cap says). What the observing hooks do
 * with the frames is one of two things, for the whole read:
 *
 * - Every frame one the hooks have already seen byte for byte (correlation id apart)
 *   and made a memo entry of (proxy/observe/memo.py), quiet on its connection: the C path
 *   does the hooks' part too. A request's Pending gets its memo entry as token; after the
 *   write each exchange is counted (in `Counters`, which proxy/metrics.py adds to the
 *   Prometheus series at each scrape), and each answered request's line is put together
 *   from the pieces its entries and its connection rendered (observe/request_line.py's
 *   `compose`, byte for byte) and appended to the request log's queue (LineSink). A
 *   request of an api whose links read it without changing its fields (the hooks' steady
 *   apis: the lag link's OffsetCommit) gets a chain.Token the C path makes, handed to each
 *   such link's `request`; its answer to the asking link's `answered`.
 * - Otherwise, where every frame's api is one the plan's observed_request_apis /
 *   observed_response_apis name (frames the Python path keeps whole for request_forwarded
 *   / response_forwarded and neither holds nor rewrites: a Produce with acks other than 0,
 *   a Fetch, a first-seen frame), it is "observed": after the write, each frame, in the
 *   read's order, goes to the hooks' request_forwarded or response_forwarded (info, a
 *   memoryview of the frame without its length prefix, its Pending), one call per frame,
 *   as the Python path's chunk_done runs them; a hook that raises an Exception goes to the
 *   connection's hook_failed (Relay.hook_failed: counted, logged with its traceback) and
 *   the next frame's hook runs. A Pending's token is then the hooks' to set, as on the
 *   Python path. A Produce's acks are read here (codec/peek.py's produce_acks, bounded by
 *   the frame): acks 0 (no answer, nothing pending) is the Python path's.
 *
 * Anything else (a frame of another api, a frame cut across reads, a full in-flight
 * table, an answer out of order or to a reply the proxy made, a frame over the
 * splitter's max_frame...) goes to the Python path with the whole read, untouched:
 * nothing of the read has been done when the C path declines it (it checks every frame
 * first, then acts).
 *
 * Which apis may be observed is the plan's observed_request_apis / observed_response_apis
 * (proxy/forward/connection.py makes them from the hooks' SteadyParts, less what the
 * HookPlan holds for admit_request or rewrites, and less SASL's apis; the plan drops
 * SASL's again), and the plan has request_forwarded and response_forwarded only where
 * the HookPlan keeps every frame whole for those hooks and holds none. An observed frame
 * is forwarded before any hook sees it: a hook or link that must hold, answer or rewrite
 * frames of an api (admit_request, rewrite_response) needs that api out of these sets,
 * through admit_api_keys / rewrite_api_keys (or inspects_requests, which turns the plan
 * off), or the C path forwards such frames untouched.
 *
 * It reads no frame body beyond the header (api key, version, correlation id), but for
 * a Produce's acks, which it reads as codec/peek.py's produce_acks does (the client id,
 * the header's tagged fields, the transactional id skipped, every length checked
 * against the frame; tests/proxy/test_steady.py's
 * test_the_c_path_reads_a_produces_acks_as_the_codec_does holds the two to the same
 * answer over real clients' Produces cut and flipped), and it uses no description of the
 * wire of its own: the bytes are the memo's keys, whose entries the codec's decoding
 * (codec/layout/) made. It reads and writes the Python objects
 * through their __slots__: `Plan` takes each class and finds each slot's offset in its
 * member descriptor, refusing a class whose slot is not a plain object slot; an object
 * is read only after its exact type was checked, and a slot that is unset (NULL) or of
 * an unexpected type sends the read to the Python path.
 *
 * Safety: every read of a peer's bytes is bounded by the read's size, checked before it
 * is made (a frame's 4-byte length against what is left, its header against its
 * length); sizes are Py_ssize_t, compared before any addition. Every reference taken
 * is released on every way out (the frames of a read hold a reference to their entry
 * until the read is done). A failure of the Python calls it makes (a transport's write)
 * propagates as the Python path's would. tests/proxy/test_steady_sanitized.py builds this file
 * with AddressSanitizer and UBSan and runs the fuzz corpus, hostile peers and real
 * clients' captured frames through it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX >= 0x030C0000
#define OBJECT_SLOT Py_T_OBJECT_EX
#define SLOT_READONLY Py_READONLY
#else
#define OBJECT_SLOT T_OBJECT_EX
#define SLOT_READONLY READONLY
#endif

#define MAX_API 128       /* api keys the tables cover (Kafka's go to 92); others: Python */
#define MAX_VERSION 32    /* versions the request counts cover; others: Python */
#define MAX_BATCH 32      /* frames of one read the C path takes; more: Python */
#define MAX_BUCKETS 32    /* duration histogram buckets */
#define MEMO_MAX_FRAME 2048 /* observe/memo.py MAX_FRAME_BYTES: larger frames are never memoised */
#define API_VERSIONS 18
#define PRODUCE 0

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}
static inline int be16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]); }

static void set_slot(PyObject *obj, Py_ssize_t off, PyObject *value) {
    PyObject *old = SLOT(obj, off);
    Py_INCREF(value);
    SLOT(obj, off) = value;
    Py_XDECREF(old);
}

/* A slot holding an int that fits a long long, or -1 with *ok = 0. */
static long long slot_ll(PyObject *obj, Py_ssize_t off, int *ok) {
    PyObject *v = SLOT(obj, off);
    if (v == NULL || !PyLong_CheckExact(v)) {
        *ok = 0;
        return -1;
    }
    int overflow = 0;
    long long r = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (r == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        *ok = 0;
        return -1;
    }
    return r;
}

/* Add `n` to an int slot (a new int object: ints are immutable). */
static int slot_add(PyObject *obj, Py_ssize_t off, long long n) {
    int ok = 1;
    long long v = slot_ll(obj, off, &ok);
    if (!ok) {
        PyErr_SetString(PyExc_TypeError, "steady: a counter slot is not an int");
        return -1;
    }
    PyObject *nv = PyLong_FromLongLong(v + n);
    if (nv == NULL)
        return -1;
    PyObject *old = SLOT(obj, off);
    SLOT(obj, off) = nv;
    Py_XDECREF(old);
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* Counters: what the request metrics count, per api key, until proxy/metrics.py takes it */

typedef struct {
    unsigned long long requests[MAX_API][MAX_VERSION];
    unsigned long long request_bytes[MAX_API];
    unsigned long long response_bytes[MAX_API];
    double duration_sum[MAX_API];
    unsigned long long buckets[MAX_API][MAX_BUCKETS];
    unsigned char any[MAX_API];
} Counts;

typedef struct {
    PyObject_HEAD
    Counts *c;
    int nbounds;            /* buckets: bounds[i] is bucket i's upper bound (the last +inf) */
    double bounds[MAX_BUCKETS];
} CountersObject;

static void counters_dealloc(CountersObject *self) {
    PyMem_Free(self->c);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *counters_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *bounds;
    static char *names[] = {"bounds", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", names, &PyTuple_Type, &bounds))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(bounds);
    if (n < 1 || n > MAX_BUCKETS) {
        PyErr_SetString(PyExc_ValueError, "Counters: between 1 and 32 bucket bounds");
        return NULL;
    }
    CountersObject *self = (CountersObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->c = PyMem_Calloc(1, sizeof(Counts));
    if (self->c == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->nbounds = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        double b = PyFloat_AsDouble(PyTuple_GET_ITEM(bounds, i));
        if (b == -1.0 && PyErr_Occurred()) {
            Py_DECREF(self);
            return NULL;
        }
        self->bounds[i] = b;
    }
    return (PyObject *)self;
}

/* take(api_key) -> None, or ({version: requests}, request_bytes, response_bytes,
 * duration_sum, [bucket counts]), the counts since the last take, which are zeroed. */
static PyObject *counters_take(CountersObject *self, PyObject *arg) {
    long key = PyLong_AsLong(arg);
    if (key == -1 && PyErr_Occurred())
        return NULL;
    if (key < 0 || key >= MAX_API || !self->c->any[key])
        Py_RETURN_NONE;
    Counts *c = self->c;
    PyObject *versions = PyDict_New(), *buckets = PyList_New(self->nbounds), *result = NULL;
    if (versions == NULL || buckets == NULL)
        goto done;
    for (int v = 0; v < MAX_VERSION; v++) {
        if (!c->requests[key][v])
            continue;
        PyObject *k = PyLong_FromLong(v), *n = PyLong_FromUnsignedLongLong(c->requests[key][v]);
        int err = k == NULL || n == NULL || PyDict_SetItem(versions, k, n) < 0;
        Py_XDECREF(k);
        Py_XDECREF(n);
        if (err)
            goto done;
    }
    for (int i = 0; i < self->nbounds; i++) {
        PyObject *n = PyLong_FromUnsignedLongLong(c->buckets[key][i]);
        if (n == NULL)
            goto done;
        PyList_SET_ITEM(buckets, i, n);
    }
    result = Py_BuildValue("(OKKdO)", versions, c->request_bytes[key], c->response_bytes[key],
                           c->duration_sum[key], buckets);
    if (result != NULL) {
        memset(c->requests[key], 0, sizeof(c->requests[key]));
        memset(c->buckets[key], 0, sizeof(c->buckets[key]));
        c->request_bytes[key] = c->response_bytes[key] = 0;
        c->duration_sum[key] = 0.0;
        c->any[key] = 0;
    }
done:
    Py_XDECREF(versions);
    Py_XDECREF(buckets);
    return result;
}

static PyMethodDef counters_methods[] = {
    {"take", (PyCFunction)counters_take, METH_O, "The counts of an api key since the last take."},
    {NULL},
};

static PyTypeObject CountersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "proxy._steady.Counters",
    .tp_basicsize = sizeof(CountersObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Counters(bounds): request metrics counted by the C path, per api key.",
    .tp_new = counters_new,
    .tp_dealloc = (destructor)counters_dealloc,
    .tp_methods = counters_methods,
};

/* ---------------------------------------------------------------------------------- */
/* Plan: what every connection of a proxy shares: the classes' layouts, the memos, the  */
/* request log's queue, the counters, and which apis the C path may take.              */

typedef struct {
    PyObject_HEAD
    PyTypeObject *pending_type, *request_entry_type, *response_entry_type, *cap_entry_type;
    PyTypeObject *state_type, *info_type, *splitter_type, *exchange_type, *sink_type, *token_type;
    struct { Py_ssize_t correlation_id, api_key, api_version, started, request_size, token, reply, rewritten; } pending;
    struct { Py_ssize_t api, head, fragment, mask, overlap, linked, request, fields; } req;
    struct { Py_ssize_t api, correlation_id, fields, decode_error, ask, asked_by, picked, entry; } token;
    struct { Py_ssize_t fields, fragment, mask, errors; } resp;
    struct { Py_ssize_t tail, ranges, fragment, mask, errors; } cap;
    struct { Py_ssize_t requests, quiet, log_fields, identity_fragment, line_head, broker_ranges; } state;
    struct { Py_ssize_t bytes_in, bytes_out, requests, responses; } info;
    struct { Py_ssize_t stopped, parked, remaining, undecided, max_frame; } splitter;
    struct { Py_ssize_t raw_sasl, raw_replies_due, before_auth, max_in_flight, max_frame_before_auth, pending; } exchange;
    struct { Py_ssize_t lines, queued, full_at, wake_at, refusing; } sink;
    PyObject *request_memo, *response_memo, *cap_memo; /* dicts */
    /* The last key each memo answered, per api key (the cap memo's: [API_VERSIONS]):
     * a frame with the same bytes is looked up with it, its hash computed once (a bytes
     * object keeps it): making and hashing fresh keys on every pair (an ApiVersions answer's is ~500
     * bytes) was a good part of a small pair's cost (bench/PROFILE.md, "Instructions per
     * small request/response pair"). Only keys the memo holds too are kept: at most
     * 2 x MAX_API + 1 of at most MEMO_MAX_FRAME bytes. */
    PyObject *request_keys[MAX_API], *response_keys[MAX_API], *cap_key;
    PyObject *hooks;     /* its broker_ranges, for an ApiVersions answer */
    PyObject *sink_obj;  /* the LineSink, or None: no request log */
    PyObject *sink_msg;  /* sink.msg: a line the queue's fast append does not take */
    PyObject *str_broker_ranges, *str_whole, *str_answered, *str_errors, *str_request;
    PyObject *render_fields; /* (fields) -> (JSON object, mask): request_line.answer_json */
    /* the last fields render_fields rendered (kept alive: no other dict has its identity)
     * and what it made of them: a link's `answered` that returns the dict it returned
     * before has not changed it (chain.py), so it is not rendered again */
    PyObject *rendered_fields, *rendered_piece;
    long long rendered_mask;
    /* per api key the C path may take with links (link_ok): the links whose `request`
     * reads it, in the chain's order (a tuple; ObservingHooks._request_links) */
    PyObject *request_links[MAX_API];
    PyObject *link_answer;   /* (info, pending, token, state, latency, size, fields, None, True): an
                              * answer a link read observed (counted, its errors, logged) when the C
                              * path does not finish it: ObservingHooks.responded */
    CountersObject *counters;
    long long clash;     /* request_line.CLASH */
    /* per api key: 1 if the C path may take it (never memoised, answered whole...: 0) */
    unsigned char request_ok[MAX_API], response_ok[MAX_API], auth[MAX_API];
    /* per api key: a link reads it, and the C path may take it, the link's part done by
     * the C path (the token made, each link's `request` called) and the hooks (link_answer) */
    unsigned char link_ok[MAX_API];
    /* per api key: its lines are always written (1), never (0), or sampled (2: Python) */
    unsigned char log_mode[MAX_API];
    int api_versions_plain; /* an ApiVersions answer's fields are its cap's */
    int observe;            /* 0: hooks that observe nothing (Plan.forwarding): forward and pair only */
    /* per api key: 1 if a read with frames the memo does not answer may still be the C
     * path's, every frame of it handed to the hooks as the Python path hands it
     * (request_forwarded / response_forwarded, after the write): apis the Python path
     * keeps whole for those hooks and neither holds, rewrites nor reads in a SASL phase */
    unsigned char observed_request_ok[MAX_API], observed_response_ok[MAX_API];
    PyObject *request_forwarded, *response_forwarded; /* the hooks' (info, frame, pending); NULL: none */
    PyObject *str_request_forwarded, *str_response_forwarded, *str_response;
} PlanObject;

static int find_slot(PyTypeObject *type, const char *name, Py_ssize_t *out) {
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL)
        return -1;
    int ok = Py_TYPE(descr) == &PyMemberDescr_Type;
    if (ok) {
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        ok = m->type == OBJECT_SLOT && !(m->flags & SLOT_READONLY) && m->offset > 0;
        if (ok)
            *out = m->offset;
    }
    Py_DECREF(descr);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "steady: %s.%s is not an object slot", type->tp_name, name);
        return -1;
    }
    return 0;
}

static int api_flags(PyObject *keys, unsigned char *table, unsigned char value) {
    PyObject *it = PyObject_GetIter(keys), *item;
    if (it == NULL)
        return -1;
    while ((item = PyIter_Next(it)) != NULL) {
        long k = PyLong_AsLong(item);
        Py_DECREF(item);
        if (k == -1 && PyErr_Occurred()) {
            Py_DECREF(it);
            return -1;
        }
        if (k >= 0 && k < MAX_API)
            table[k] = value;
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

#define TYPE_ARG(name) \
    if (!PyType_Check(name)) { PyErr_SetString(PyExc_TypeError, "steady: " #name " must be a class"); goto fail; }

static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {
        "pending", "request_entry", "response_entry", "cap_entry", "state", "info", "splitter",
        "exchange", "sink_type", "request_memo", "response_memo", "cap_memo", "hooks", "sink",
        "counters", "clash", "request_apis", "response_apis", "auth_apis", "log_always",
        "log_never", "api_versions_plain", "token", "link_apis", "request_links", "link_answer",
        "render_fields", "observed_request_apis", "observed_response_apis", "request_forwarded",
        "response_forwarded", NULL};
    PyObject *pending, *request_entry, *response_entry, *cap_entry, *state, *info, *splitter, *exchange,
        *sink_type, *request_memo, *response_memo, *cap_memo, *hooks, *sink, *counters, *request_apis,
        *response_apis, *auth_apis, *log_always, *log_never, *token, *link_apis, *request_links, *link_answer,
        *render_fields, *observed_requests = NULL, *observed_responses = NULL, *request_forwarded = Py_None,
        *response_forwarded = Py_None;
    long long clash;
    int plain;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwds, "OOOOOOOOOO!O!O!OOO!LOOOOOpOOO!OO|OOOO", names, &pending, &request_entry, &response_entry,
            &cap_entry, &state, &info, &splitter, &exchange, &sink_type, &PyDict_Type, &request_memo,
            &PyDict_Type, &response_memo, &PyDict_Type, &cap_memo, &hooks, &sink, &CountersType, &counters,
            &clash, &request_apis, &response_apis, &auth_apis, &log_always, &log_never, &plain, &token,
            &link_apis, &PyDict_Type, &request_links, &link_answer, &render_fields, &observed_requests,
            &observed_responses, &request_forwarded, &response_forwarded))
        return NULL;
    if (!PyCallable_Check(link_answer) || !PyCallable_Check(render_fields)) {
        PyErr_SetString(PyExc_TypeError, "steady: link_answer and render_fields must be callables");
        return NULL;
    }
    if ((request_forwarded != Py_None && !PyCallable_Check(request_forwarded))
        || (response_forwarded != Py_None && !PyCallable_Check(response_forwarded))) {
        PyErr_SetString(PyExc_TypeError, "steady: request_forwarded and response_forwarded must be callables or None");
        return NULL;
    }
    PlanObject *self = (PlanObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    TYPE_ARG(pending) TYPE_ARG(request_entry) TYPE_ARG(response_entry) TYPE_ARG(cap_entry)
    TYPE_ARG(state) TYPE_ARG(info) TYPE_ARG(splitter) TYPE_ARG(exchange) TYPE_ARG(sink_type) TYPE_ARG(token)
#define KEEP_TYPE(field, obj) self->field = (PyTypeObject *)Py_NewRef(obj)
    KEEP_TYPE(pending_type, pending);
    KEEP_TYPE(request_entry_type, request_entry);
    KEEP_TYPE(response_entry_type, response_entry);
    KEEP_TYPE(cap_entry_type, cap_entry);
    KEEP_TYPE(state_type, state);
    KEEP_TYPE(info_type, info);
    KEEP_TYPE(splitter_type, splitter);
    KEEP_TYPE(exchange_type, exchange);
    KEEP_TYPE(sink_type, sink_type);
    KEEP_TYPE(token_type, token);
#define FIND(type, group, name) if (find_slot(self->type, #name, &self->group.name) < 0) goto fail;
    FIND(pending_type, pending, correlation_id) FIND(pending_type, pending, api_key)
    FIND(pending_type, pending, api_version) FIND(pending_type, pending, started)
    FIND(pending_type, pending, request_size) FIND(pending_type, pending, token)
    FIND(pending_type, pending, reply) FIND(pending_type, pending, rewritten)
    FIND(request_entry_type, req, api) FIND(request_entry_type, req, head) FIND(request_entry_type, req, fragment)
    FIND(request_entry_type, req, mask) FIND(request_entry_type, req, overlap)
    FIND(request_entry_type, req, linked) FIND(request_entry_type, req, request)
    FIND(request_entry_type, req, fields)
    FIND(token_type, token, api) FIND(token_type, token, correlation_id) FIND(token_type, token, fields)
    FIND(token_type, token, decode_error) FIND(token_type, token, ask) FIND(token_type, token, asked_by)
    FIND(token_type, token, picked) FIND(token_type, token, entry)
    FIND(response_entry_type, resp, fields) FIND(response_entry_type, resp, fragment)
    FIND(response_entry_type, resp, mask)
    FIND(response_entry_type, resp, errors)
    FIND(cap_entry_type, cap, tail)
    FIND(cap_entry_type, cap, ranges) FIND(cap_entry_type, cap, fragment)
    FIND(cap_entry_type, cap, mask) FIND(cap_entry_type, cap, errors)
    FIND(state_type, state, requests) FIND(state_type, state, quiet) FIND(state_type, state, log_fields)
    FIND(state_type, state, identity_fragment) FIND(state_type, state, line_head)
    FIND(state_type, state, broker_ranges)
    FIND(info_type, info, bytes_in) FIND(info_type, info, bytes_out) FIND(info_type, info, requests)
    FIND(info_type, info, responses)
#define FIND_AS(type, group, field, name) if (find_slot(self->type, name, &self->group.field) < 0) goto fail;
    FIND(splitter_type, splitter, stopped) FIND_AS(splitter_type, splitter, parked, "_parked")
    FIND_AS(splitter_type, splitter, remaining, "_remaining") FIND_AS(splitter_type, splitter, undecided, "_undecided")
    FIND(splitter_type, splitter, max_frame)
    FIND(exchange_type, exchange, raw_sasl) FIND(exchange_type, exchange, raw_replies_due)
    FIND(exchange_type, exchange, before_auth) FIND(exchange_type, exchange, max_in_flight)
    FIND(exchange_type, exchange, max_frame_before_auth) FIND(exchange_type, exchange, pending)
    FIND_AS(sink_type, sink, lines, "_lines") FIND_AS(sink_type, sink, queued, "_queued")
    FIND_AS(sink_type, sink, full_at, "_full_at") FIND_AS(sink_type, sink, wake_at, "_wake_at")
    FIND_AS(sink_type, sink, refusing, "_refusing")
#undef FIND
#undef FIND_AS
    self->request_memo = Py_NewRef(request_memo);
    self->response_memo = Py_NewRef(response_memo);
    self->cap_memo = Py_NewRef(cap_memo);
    self->hooks = Py_NewRef(hooks);
    self->sink_obj = Py_NewRef(sink);
    if (sink != Py_None) {
        if (Py_TYPE(sink) != self->sink_type) {
            PyErr_SetString(PyExc_TypeError, "steady: sink is not a sink_type");
            goto fail;
        }
        if ((self->sink_msg = PyObject_GetAttrString(sink, "msg")) == NULL)
            goto fail;
    }
    if ((self->str_broker_ranges = PyUnicode_InternFromString("broker_ranges")) == NULL
        || (self->str_whole = PyUnicode_InternFromString("whole")) == NULL
        || (self->str_answered = PyUnicode_InternFromString("answered")) == NULL
        || (self->str_errors = PyUnicode_InternFromString("errors")) == NULL
        || (self->str_request = PyUnicode_InternFromString("request")) == NULL
        || (self->str_response = PyUnicode_InternFromString("response")) == NULL
        || (self->str_request_forwarded = PyUnicode_InternFromString("request_forwarded")) == NULL
        || (self->str_response_forwarded = PyUnicode_InternFromString("response_forwarded")) == NULL)
        goto fail;
    /* The C path makes a linked request's Token itself (link_request), filling the eight
     * slots found above: a Token with any other slot, a __dict__ or weak references would
     * be left half made. */
    if (self->token_type->tp_basicsize != (Py_ssize_t)(sizeof(PyObject) + 8 * sizeof(PyObject *))
        || self->token_type->tp_dictoffset != 0 || self->token_type->tp_weaklistoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "steady: token must have exactly the slots the C path fills");
        goto fail;
    }
    self->render_fields = Py_NewRef(render_fields);
    self->link_answer = Py_NewRef(link_answer);
    self->counters = (CountersObject *)Py_NewRef(counters);
    self->observe = 1;
    self->clash = clash;
    self->api_versions_plain = plain;
    if (api_flags(request_apis, self->request_ok, 1) < 0 || api_flags(response_apis, self->response_ok, 1) < 0
        || api_flags(auth_apis, self->auth, 1) < 0 || api_flags(link_apis, self->link_ok, 1) < 0)
        goto fail;
    memset(self->log_mode, 2, sizeof(self->log_mode));
    if (api_flags(log_always, self->log_mode, 1) < 0 || api_flags(log_never, self->log_mode, 0) < 0)
        goto fail;
    /* both hooks or neither: a read's frames are handed over in both directions */
    if (request_forwarded != Py_None && response_forwarded != Py_None) {
        self->request_forwarded = Py_NewRef(request_forwarded);
        self->response_forwarded = Py_NewRef(response_forwarded);
        if ((observed_requests != NULL && api_flags(observed_requests, self->observed_request_ok, 1) < 0)
            || (observed_responses != NULL && api_flags(observed_responses, self->observed_response_ok, 1) < 0))
            goto fail;
        /* never the apis of SASL's phases: the Python path reads their bodies (sasl.py) */
        for (int k = 0; k < MAX_API; k++)
            if (self->auth[k])
                self->observed_request_ok[k] = self->observed_response_ok[k] = 0;
    }
    for (int k = 0; k < MAX_API; k++) {
        if (!self->link_ok[k])
            continue;
        PyObject *key = PyLong_FromLong(k);
        if (key == NULL)
            goto fail;
        PyObject *links = PyDict_GetItemWithError(request_links, key);
        Py_DECREF(key);
        if (links == NULL && PyErr_Occurred())
            goto fail;
        if (links == NULL || !PyTuple_CheckExact(links)) {  /* the C path leaves it to Python */
            self->link_ok[k] = 0;
            continue;
        }
        self->request_links[k] = Py_NewRef(links);
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* Plan.forwarding(pending, info, splitter, exchange, request_apis, response_apis,
 * auth_apis): the plan of hooks that observe nothing (no frame held, kept or rewritten):
 * the C path forwards and pairs the reads of these apis, and does nothing else. */
static PyObject *plan_forwarding(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"pending", "info", "splitter", "exchange", "request_apis", "response_apis",
                            "auth_apis", NULL};
    PyObject *pending, *info, *splitter, *exchange, *request_apis, *response_apis, *auth_apis;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOO", names, &pending, &info, &splitter, &exchange,
                                     &request_apis, &response_apis, &auth_apis))
        return NULL;
    PlanObject *self = (PlanObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    TYPE_ARG(pending) TYPE_ARG(info) TYPE_ARG(splitter) TYPE_ARG(exchange)
    KEEP_TYPE(pending_type, pending);
    KEEP_TYPE(info_type, info);
    KEEP_TYPE(splitter_type, splitter);
    KEEP_TYPE(exchange_type, exchange);
#define FIND(type, group, name) if (find_slot(self->type, #name, &self->group.name) < 0) goto fail;
#define FIND_AS(type, group, field, name) if (find_slot(self->type, name, &self->group.field) < 0) goto fail;
    FIND(pending_type, pending, correlation_id) FIND(pending_type, pending, api_key)
    FIND(pending_type, pending, api_version) FIND(pending_type, pending, started)
    FIND(pending_type, pending, request_size) FIND(pending_type, pending, token)
    FIND(pending_type, pending, reply) FIND(pending_type, pending, rewritten)
    FIND(info_type, info, bytes_in) FIND(info_type, info, bytes_out) FIND(info_type, info, requests)
    FIND(info_type, info, responses)
    FIND(splitter_type, splitter, stopped) FIND_AS(splitter_type, splitter, parked, "_parked")
    FIND_AS(splitter_type, splitter, remaining, "_remaining") FIND_AS(splitter_type, splitter, undecided, "_undecided")
    FIND(splitter_type, splitter, max_frame)
    FIND(exchange_type, exchange, raw_sasl) FIND(exchange_type, exchange, raw_replies_due)
    FIND(exchange_type, exchange, before_auth) FIND(exchange_type, exchange, max_in_flight)
    FIND(exchange_type, exchange, max_frame_before_auth) FIND(exchange_type, exchange, pending)
#undef FIND
#undef FIND_AS
    self->observe = 0;
    if (api_flags(request_apis, self->request_ok, 1) < 0 || api_flags(response_apis, self->response_ok, 1) < 0
        || api_flags(auth_apis, self->auth, 1) < 0)
        goto fail;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static PyMethodDef plan_methods[] = {
    {"forwarding", (PyCFunction)(void (*)(void))plan_forwarding, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "The plan of hooks that observe nothing: forward and pair only."},
    {NULL},
};

static int plan_traverse(PlanObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->pending_type);
    Py_VISIT(self->request_entry_type);
    Py_VISIT(self->response_entry_type);
    Py_VISIT(self->cap_entry_type);
    Py_VISIT(self->state_type);
    Py_VISIT(self->info_type);
    Py_VISIT(self->splitter_type);
    Py_VISIT(self->exchange_type);
    Py_VISIT(self->sink_type);
    Py_VISIT(self->token_type);
    for (int k = 0; k < MAX_API; k++)
        Py_VISIT(self->request_links[k]);
    Py_VISIT(self->link_answer);
    Py_VISIT(self->request_forwarded);
    Py_VISIT(self->response_forwarded);
    Py_VISIT(self->render_fields);
    Py_VISIT(self->rendered_fields);
    Py_VISIT(self->rendered_piece);
    Py_VISIT(self->request_memo);
    Py_VISIT(self->response_memo);
    Py_VISIT(self->cap_memo);
    for (int k = 0; k < MAX_API; k++) {
        Py_VISIT(self->request_keys[k]);
        Py_VISIT(self->response_keys[k]);
    }
    Py_VISIT(self->cap_key);
    Py_VISIT(self->hooks);
    Py_VISIT(self->sink_obj);
    Py_VISIT(self->sink_msg);
    Py_VISIT(self->counters);
    return 0;
}

static int plan_clear(PlanObject *self) {
    Py_CLEAR(self->pending_type);
    Py_CLEAR(self->request_entry_type);
    Py_CLEAR(self->response_entry_type);
    Py_CLEAR(self->cap_entry_type);
    Py_CLEAR(self->state_type);
    Py_CLEAR(self->info_type);
    Py_CLEAR(self->splitter_type);
    Py_CLEAR(self->exchange_type);
    Py_CLEAR(self->sink_type);
    Py_CLEAR(self->token_type);
    for (int k = 0; k < MAX_API; k++)
        Py_CLEAR(self->request_links[k]);
    Py_CLEAR(self->link_answer);
    Py_CLEAR(self->request_forwarded);
    Py_CLEAR(self->response_forwarded);
    Py_CLEAR(self->str_response);
    Py_CLEAR(self->str_request_forwarded);
    Py_CLEAR(self->str_response_forwarded);
    Py_CLEAR(self->str_whole);
    Py_CLEAR(self->str_answered);
    Py_CLEAR(self->str_errors);
    Py_CLEAR(self->str_request);
    Py_CLEAR(self->render_fields);
    Py_CLEAR(self->rendered_fields);
    Py_CLEAR(self->rendered_piece);
    Py_CLEAR(self->request_memo);
    Py_CLEAR(self->response_memo);
    Py_CLEAR(self->cap_memo);
    for (int k = 0; k < MAX_API; k++) {
        Py_CLEAR(self->request_keys[k]);
        Py_CLEAR(self->response_keys[k]);
    }
    Py_CLEAR(self->cap_key);
    Py_CLEAR(self->hooks);
    Py_CLEAR(self->sink_obj);
    Py_CLEAR(self->sink_msg);
    Py_CLEAR(self->str_broker_ranges);
    Py_CLEAR(self->counters);
    return 0;
}

static void plan_dealloc(PlanObject *self) {
    PyObject_GC_UnTrack(self);
    plan_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "proxy._steady.Plan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Plan(...): what a proxy's connections share on the C path (proxy/steady.py).",
    .tp_new = plan_new,
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_traverse = (traverseproc)plan_traverse,
    .tp_clear = (inquiry)plan_clear,
    .tp_methods = plan_methods,
};

/* ---------------------------------------------------------------------------------- */
/* Core: one connection                                                                 */

typedef struct {
    PyObject_HEAD
    PlanObject *plan;
    PyObject *py_request, *py_response;        /* the Python path of each direction */
    PyObject *exchange, *queue, *queue_append, *queue_popleft;
    PyObject *requests, *responses;            /* the two FrameSplitters */
    PyObject *info, *state;
    PyObject *client_write, *client_is_closing, *upstream_write;
    PyObject *hook_failed;                     /* the connection's Relay.hook_failed, or NULL */
    long long max_in_flight, max_frame_before_auth, max_request_frame, max_response_frame;
    int ready;
    double last_active;                        /* CLOCK_MONOTONIC seconds of its last read */
    unsigned long long taken_requests, taken_responses;
    unsigned long long observed_requests, observed_responses; /* of those: reads handed to the hooks */
} CoreObject;

static double monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static PyObject *core_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"plan", "python_request", "python_response", NULL};
    PyObject *plan, *py_request, *py_response;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OO", names, &PlanType, &plan, &py_request, &py_response))
        return NULL;
    CoreObject *self = (CoreObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->plan = (PlanObject *)Py_NewRef(plan);
    self->py_request = Py_NewRef(py_request);
    self->py_response = Py_NewRef(py_response);
    return (PyObject *)self;
}

/* bind(exchange, requests, responses, info, state, client[, hook_failed]): the
 * connection's objects, once it is open. The C path takes nothing before, nor while
 * `ready` is False. With `hook_failed` (the connection's Relay.hook_failed: a hook that
 * raised, counted and logged) it may take reads whose frames the hooks observe
 * (the plan's request_forwarded and response_forwarded). */
static PyObject *core_bind(CoreObject *self, PyObject *args) {
    PyObject *exchange, *requests, *responses, *info, *state, *client, *hook_failed = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOO|O", &exchange, &requests, &responses, &info, &state, &client, &hook_failed))
        return NULL;
    if (hook_failed != Py_None && !PyCallable_Check(hook_failed)) {
        PyErr_SetString(PyExc_TypeError, "steady: bind()'s hook_failed must be a callable or None");
        return NULL;
    }
    PlanObject *p = self->plan;
    if (Py_TYPE(exchange) != p->exchange_type || Py_TYPE(requests) != p->splitter_type
        || Py_TYPE(responses) != p->splitter_type || Py_TYPE(info) != p->info_type
        || (p->observe ? Py_TYPE(state) != p->state_type : state != Py_None)) {
        PyErr_SetString(PyExc_TypeError, "steady: bind() given objects of other classes than the plan's");
        return NULL;
    }
    int ok = 1;
    long long max_in_flight = slot_ll(exchange, p->exchange.max_in_flight, &ok);
    long long before_auth = slot_ll(exchange, p->exchange.max_frame_before_auth, &ok);
    long long max_request = slot_ll(requests, p->splitter.max_frame, &ok);
    long long max_response = slot_ll(responses, p->splitter.max_frame, &ok);
    PyObject *queue = SLOT(exchange, p->exchange.pending);
    if (!ok || queue == NULL) {
        PyErr_SetString(PyExc_TypeError, "steady: bind() given an exchange or splitter without its limits");
        return NULL;
    }
    PyObject *append = PyObject_GetAttrString(queue, "append");
    PyObject *popleft = append ? PyObject_GetAttrString(queue, "popleft") : NULL;
    PyObject *write = popleft ? PyObject_GetAttrString(client, "write") : NULL;
    PyObject *closing = write ? PyObject_GetAttrString(client, "is_closing") : NULL;
    if (closing == NULL) {
        Py_XDECREF(append);
        Py_XDECREF(popleft);
        Py_XDECREF(write);
        return NULL;
    }
    Py_XSETREF(self->exchange, Py_NewRef(exchange));
    Py_XSETREF(self->queue, Py_NewRef(queue));
    Py_XSETREF(self->queue_append, append);
    Py_XSETREF(self->queue_popleft, popleft);
    Py_XSETREF(self->requests, Py_NewRef(requests));
    Py_XSETREF(self->responses, Py_NewRef(responses));
    Py_XSETREF(self->info, Py_NewRef(info));
    Py_XSETREF(self->state, Py_NewRef(state));
    Py_XSETREF(self->client_write, write);
    Py_XSETREF(self->client_is_closing, closing);
    Py_XSETREF(self->hook_failed, hook_failed == Py_None ? NULL : Py_NewRef(hook_failed));
    self->max_in_flight = max_in_flight;
    self->max_frame_before_auth = before_auth;
    self->max_request_frame = max_request;
    self->max_response_frame = max_response;
    Py_RETURN_NONE;
}

static PyObject *core_set_upstream(CoreObject *self, PyObject *transport) {
    PyObject *write = PyObject_GetAttrString(transport, "write");
    if (write == NULL)
        return NULL;
    Py_XSETREF(self->upstream_write, write);
    Py_RETURN_NONE;
}

/* release(): drop the connection's objects (it closed). */
static PyObject *core_release(CoreObject *self, PyObject *Py_UNUSED(unused)) {
    self->ready = 0;
    Py_CLEAR(self->exchange);
    Py_CLEAR(self->queue);
    Py_CLEAR(self->queue_append);
    Py_CLEAR(self->queue_popleft);
    Py_CLEAR(self->requests);
    Py_CLEAR(self->responses);
    Py_CLEAR(self->info);
    Py_CLEAR(self->state);
    Py_CLEAR(self->client_write);
    Py_CLEAR(self->client_is_closing);
    Py_CLEAR(self->upstream_write);
    Py_CLEAR(self->hook_failed);
    Py_RETURN_NONE;
}

/* A splitter at a frame boundary, nothing parked, not stopped. */
static int splitter_idle(PlanObject *p, PyObject *splitter) {
    PyObject *stopped = SLOT(splitter, p->splitter.stopped), *parked = SLOT(splitter, p->splitter.parked);
    PyObject *remaining = SLOT(splitter, p->splitter.remaining), *undecided = SLOT(splitter, p->splitter.undecided);
    if (stopped != Py_False || undecided != Py_None || parked == NULL || !PyList_CheckExact(parked)
        || PyList_GET_SIZE(parked) != 0 || remaining == NULL || !PyLong_CheckExact(remaining))
        return 0;
    return PyLong_AsSsize_t(remaining) == 0;
}

static PyObject *python_path(PyObject *fallback, PyObject *data) { return PyObject_CallOneArg(fallback, data); }

typedef struct {
    PyObject *entry;     /* its memo entry: a new reference, released when the read is done */
    PyObject *pending;   /* its Pending, once made (a new reference) */
    int api_key, version, linked;
    int32_t corr;
    Py_ssize_t size;     /* the frame's body size */
    Py_ssize_t start;    /* where its body starts in the read */
} RequestFrame;

static void drop_request_frames(RequestFrame *frames, int count) {
    for (int i = 0; i < count; i++) {
        Py_XDECREF(frames[i].entry);
        Py_XDECREF(frames[i].pending);
    }
}

/* `memo`'s value (borrowed) for the key `head` + `rest` (`head_len` <= 4 bytes), or NULL
 * (an error set, or none). `*last` is the last key of its kind `memo` answered: when
 * the same bytes come again it is the key looked up (its hash kept), else a new one,
 * kept in its place if `memo` knows it. The same value either way: the same bytes. */
static PyObject *memo_get(PyObject *memo, PyObject **last, const char *head, Py_ssize_t head_len,
                          const unsigned char *rest, Py_ssize_t rest_len) {
    PyObject *key = *last;
    if (key != NULL && PyBytes_GET_SIZE(key) == head_len + rest_len
        && memcmp(PyBytes_AS_STRING(key), head, (size_t)head_len) == 0
        && memcmp(PyBytes_AS_STRING(key) + head_len, rest, (size_t)rest_len) == 0) {
        PyObject *found = PyDict_GetItemWithError(memo, key);
        if (found == NULL)
            Py_CLEAR(*last);  /* gone from the memo: not kept */
        return found;
    }
    key = PyBytes_FromStringAndSize(NULL, head_len + rest_len);
    if (key == NULL)
        return NULL;
    memcpy(PyBytes_AS_STRING(key), head, (size_t)head_len);
    memcpy(PyBytes_AS_STRING(key) + head_len, rest, (size_t)rest_len);
    PyObject *found = PyDict_GetItemWithError(memo, key);
    if (found != NULL)
        Py_XSETREF(*last, key);
    else
        Py_DECREF(key);
    return found;
}

/* The memo entry of a request frame (a new reference), or NULL (Python's). */
static PyObject *request_entry(PlanObject *p, PyObject *state, const unsigned char *body, Py_ssize_t size) {
    /* the key: the frame but its correlation id (memo.request_key) */
    PyObject *entry = memo_get(p->request_memo, &p->request_keys[be16(body)], (const char *)body, 4, body + 8, size - 8);
    if (entry == NULL || Py_TYPE(entry) != p->request_entry_type)
        return NULL;
    PyObject *fragment = SLOT(entry, p->req.fragment), *head = SLOT(entry, p->req.head);
    PyObject *linked = SLOT(entry, p->req.linked);
    if (fragment == NULL || !PyBytes_CheckExact(fragment) || head == NULL || !PyBytes_CheckExact(head)
        || (linked != Py_False && (linked != Py_True || !p->link_ok[be16(body)])))
        return NULL;
    if (linked == Py_True && (SLOT(entry, p->req.api) == NULL || SLOT(entry, p->req.request) == NULL
                              || SLOT(entry, p->req.fields) == NULL))
        return NULL;  /* what link_request makes its token of */
    PyObject *quiet = SLOT(state, p->state.quiet);
    if (quiet == NULL || !PySet_CheckExact(quiet))
        return NULL;
    int known = PySet_Contains(quiet, entry);
    if (known != 1)
        return NULL;
    return Py_NewRef(entry);
}

/* A memoised request that links read, forwarded and counted: its token (a chain.Token
 * of its entry's fields) on its Pending, and each link naming its api handed it, as
 * ObservingHooks.steady_link_request does; the token then refers to the entry (its
 * links leave its fields as they are: the apis of link_ok are the hooks' steady ones). */
static int link_request(CoreObject *self, RequestFrame *f) {
    PlanObject *p = self->plan;
    PyObject *entry = f->entry, *pending = f->pending;
    PyObject *api = SLOT(entry, p->req.api), *fields = SLOT(entry, p->req.fields);
    PyObject *request = SLOT(entry, p->req.request), *corr = SLOT(pending, p->pending.correlation_id);
    PyObject *links = p->request_links[f->api_key];
    if (api == NULL || fields == NULL || request == NULL || corr == NULL || links == NULL) {
        PyErr_SetString(PyExc_TypeError, "steady: a linked request's entry lost its slots");
        return -1;
    }
    PyTypeObject *tt = p->token_type;
    PyObject *token = tt->tp_alloc(tt, 0);
    if (token == NULL)
        return -1;
    SLOT(token, p->token.api) = Py_NewRef(api);
    SLOT(token, p->token.correlation_id) = Py_NewRef(corr);
    SLOT(token, p->token.fields) = Py_NewRef(fields);
    SLOT(token, p->token.decode_error) = Py_NewRef(Py_None);
    SLOT(token, p->token.ask) = Py_NewRef(Py_None);
    SLOT(token, p->token.asked_by) = Py_NewRef(Py_None);
    SLOT(token, p->token.picked) = Py_NewRef(Py_None);
    SLOT(token, p->token.entry) = Py_NewRef(Py_None);
    set_slot(pending, p->pending.token, token);
    Py_INCREF(links);
    Py_INCREF(request);
    int err = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(links) && !err; i++) {
        PyObject *args[6] = {PyTuple_GET_ITEM(links, i), self->info, self->state, token, request, Py_None};
        PyObject *r = PyObject_VectorcallMethod(p->str_request, args, 6 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r == NULL)
            err = 1;
        Py_XDECREF(r);
    }
    Py_DECREF(request);
    Py_DECREF(links);
    if (!err)
        set_slot(token, p->token.entry, entry);
    Py_DECREF(token);
    return err ? -1 : 0;
}

/* ---- Frames the hooks observe (the memo does not answer them) ------------------------ */

/* A Produce request's acks, as codec/peek.py's produce_acks reads it, from `body` (the
 * whole frame but its length prefix, `size` bytes, the header's first 8 checked by the
 * caller): 1 with *acks set, or 0 when what leads to it is cut or malformed (the
 * Python path then has the read). Every read is checked against `size` first; lengths
 * are widened before they are added. */
static int uvarint(const unsigned char *body, Py_ssize_t size, Py_ssize_t *pos, unsigned long long *out) {
    unsigned long long v = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (*pos >= size)
            return 0;
        unsigned char byte = body[(*pos)++];
        v |= (unsigned long long)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;  /* longer than 5 bytes */
}

static int skip(Py_ssize_t size, Py_ssize_t *pos, unsigned long long n) {
    if (n > (unsigned long long)(size - *pos))
        return 0;
    *pos += (Py_ssize_t)n;
    return 1;
}

static int produce_acks(const unsigned char *body, Py_ssize_t size, int version, int *acks) {
    if (size < 10)
        return 0;
    int client_id = be16(body + 8);
    Py_ssize_t pos = 10;
    if (client_id > 0 && !skip(size, &pos, (unsigned long long)client_id))
        return 0;
    int flexible = version >= 9;
    unsigned long long n;
    if (flexible) {  /* the request header's tagged fields */
        unsigned long long count;
        if (!uvarint(body, size, &pos, &count))
            return 0;
        for (unsigned long long i = 0; i < count; i++) {  /* each takes 2 bytes at least: bounded by size */
            if (!uvarint(body, size, &pos, &n) || !uvarint(body, size, &pos, &n) || !skip(size, &pos, n))
                return 0;
        }
    }
    if (version >= 3) {  /* transactional_id */
        if (flexible) {
            if (!uvarint(body, size, &pos, &n) || (n > 1 && !skip(size, &pos, n - 1)))
                return 0;
        } else {
            if (size - pos < 2)
                return 0;
            int txn = be16(body + pos);
            pos += 2;
            if (txn > 0 && !skip(size, &pos, (unsigned long long)txn))
                return 0;
        }
    }
    if (size - pos < 2)
        return 0;
    *acks = be16(body + pos);
    return 1;
}

/* A hook that raised, as the Python path's _Side.run_after takes it: an Exception is
 * handed to the connection's hook_failed(hook.__name__, api_key, direction) while it is
 * the exception being handled (its log.exception prints its traceback), then dropped,
 * and the next frame's hook runs (0); anything else propagates (-1). `name` stands in
 * for a hook without a __name__. */
static int hook_raised(CoreObject *self, PyObject *hook, PyObject *name, int api_key, PyObject *direction) {
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *before = PyErr_GetHandledException();
    PyErr_SetHandledException(value);
    PyObject *named = PyObject_GetAttrString(hook, "__name__");
    if (named == NULL) {
        PyErr_Clear();
        named = Py_NewRef(name);
    }
    PyObject *key = PyLong_FromLong(api_key), *r = NULL;
    if (key != NULL) {
        PyObject *args[3] = {named, key, direction};
        r = PyObject_Vectorcall(self->hook_failed, args, 3, NULL);
        Py_DECREF(key);
    }
    Py_DECREF(named);
    PyErr_SetHandledException(before);
    Py_XDECREF(before);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* After a read went on: each of its `count` frames handed to `hook` (info, frame,
 * pending) in the read's order, as the Python path's chunk_done runs them; a frame is a
 * memoryview of `data` without its length prefix (starts[i], sizes[i]), as the
 * splitter's. 0, or -1 with an error (one a hook raised that is no Exception). */
static int observe_frames(CoreObject *self, PyObject *data, PyObject *hook, PyObject *name, PyObject *direction,
                          PyObject **pendings, const Py_ssize_t *starts, const Py_ssize_t *sizes, const int *keys,
                          int count) {
    PyObject *view = PyMemoryView_FromObject(data);
    if (view == NULL)
        return -1;
    int err = 0;
    for (int i = 0; i < count && !err; i++) {
        PyObject *frame = PySequence_GetSlice(view, starts[i], starts[i] + sizes[i]);
        if (frame == NULL) {
            err = 1;
            break;
        }
        PyObject *args[3] = {self->info, frame, pendings[i]};
        PyObject *r = PyObject_Vectorcall(hook, args, 3, NULL);
        Py_DECREF(frame);
        if (r != NULL)
            Py_DECREF(r);
        else if (hook_raised(self, hook, name, keys[i], direction) < 0)
            err = 1;
    }
    Py_DECREF(view);
    return err ? -1 : 0;
}

static PyObject *core_feed_request(CoreObject *self, PyObject *data) {
    PlanObject *p = self->plan;
    RequestFrame frames[MAX_BATCH];
    int count = 0;
    /* observed: a frame of the read is not the memo's, so every frame of it goes to the
     * hooks (request_forwarded) once the read went on, as on the Python path; possible
     * while every frame's api may be observed (observable) */
    int observing = p->request_forwarded != NULL && self->hook_failed != NULL;
    int observed = 0, observable = 1;
    if (!self->ready || !PyBytes_CheckExact(data) || self->upstream_write == NULL || self->exchange == NULL)
        return python_path(self->py_request, data);
    PyObject *exchange = self->exchange, *state = self->state;
    if (!splitter_idle(p, self->requests) || SLOT(exchange, p->exchange.raw_sasl) != Py_None)
        return python_path(self->py_request, data);
    PyObject *before_auth_slot = SLOT(exchange, p->exchange.before_auth);
    if (before_auth_slot != Py_True && before_auth_slot != Py_False)
        return python_path(self->py_request, data);
    int before_auth = before_auth_slot == Py_True, ends_auth = 0;
    Py_ssize_t in_flight = PyObject_Size(self->queue);
    if (in_flight < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), pos = 0;
    /* every frame checked before anything is done */
    while (pos < n) {
        if (count == MAX_BATCH || n - pos < 4)
            goto python;
        int32_t size = be32(buf + pos);
        if (size < 8 || size > self->max_request_frame || (Py_ssize_t)size > n - pos - 4)
            goto python;
        const unsigned char *body = buf + pos + 4;
        int api_key = be16(body), version = be16(body + 2);
        if (api_key < 0 || api_key >= MAX_API || version < 0 || version >= MAX_VERSION)
            goto python;
        int memo_ok = size <= MEMO_MAX_FRAME && p->request_ok[api_key];
        int can_observe = observing && p->observed_request_ok[api_key];
        if (can_observe && api_key == PRODUCE) {
            int acks = 0;  /* acks 0: no answer, nothing pending (the Python path's) */
            if (!produce_acks(body, size, version, &acks) || acks == 0)
                can_observe = 0;
        }
        if (!memo_ok && !can_observe)
            goto python;
        observable &= can_observe;
        if (in_flight + count >= self->max_in_flight)
            goto python;
        if (before_auth) {
            if (!p->auth[api_key]) {
                before_auth = 0;
                ends_auth = 1;
            } else if (size > self->max_frame_before_auth)
                goto python;
        }
        PyObject *entry = NULL;
        if (!memo_ok)
            observed = 1;
        else if (p->observe && !observed) {
            entry = request_entry(p, state, body, size);
            if (entry == NULL) {
                if (PyErr_Occurred())
                    goto fail;
                if (!can_observe)
                    goto python;
                observed = 1;
            }
        }
        frames[count].entry = entry;
        frames[count].pending = NULL;
        frames[count].linked = entry != NULL && SLOT(entry, p->req.linked) == Py_True;
        frames[count].api_key = api_key;
        frames[count].version = version;
        frames[count].corr = be32(body + 4);
        frames[count].size = size;
        frames[count].start = pos + 4;
        count++;
        pos += 4 + (Py_ssize_t)size;
    }
    if (count == 0)
        goto python;
    if (observed) {
        if (!observable)
            goto python;
        for (int i = 0; i < count; i++) {  /* the hooks look each frame up in the memo themselves */
            Py_CLEAR(frames[i].entry);
            frames[i].linked = 0;
        }
    }
    /* the exchange: each request pending, as KafkaExchange.request records it */
    double now = monotonic();
    PyObject *started = PyFloat_FromDouble(now);
    if (started == NULL)
        goto fail;
    for (int i = 0; i < count; i++) {
        PyTypeObject *pt = p->pending_type;
        PyObject *pending = pt->tp_alloc(pt, 0);
        if (pending == NULL) {
            Py_DECREF(started);
            goto fail;
        }
        PyObject *corr = PyLong_FromLong(frames[i].corr), *key = PyLong_FromLong(frames[i].api_key);
        PyObject *version = PyLong_FromLong(frames[i].version), *size = PyLong_FromSsize_t(frames[i].size + 4);
        if (corr == NULL || key == NULL || version == NULL || size == NULL) {
            Py_XDECREF(corr);
            Py_XDECREF(key);
            Py_XDECREF(version);
            Py_XDECREF(size);
            Py_DECREF(pending);
            Py_DECREF(started);
            goto fail;
        }
        SLOT(pending, p->pending.correlation_id) = corr;
        SLOT(pending, p->pending.api_key) = key;
        SLOT(pending, p->pending.api_version) = version;
        SLOT(pending, p->pending.started) = Py_NewRef(started);
        SLOT(pending, p->pending.request_size) = size;
        /* a linked request's token is made by link_request, once forwarded and counted */
        SLOT(pending, p->pending.token) = Py_NewRef(frames[i].linked || !frames[i].entry ? Py_None : frames[i].entry);
        SLOT(pending, p->pending.reply) = Py_NewRef(Py_None);
        SLOT(pending, p->pending.rewritten) = Py_NewRef(Py_None);
        frames[i].pending = pending;
        PyObject *r = PyObject_CallOneArg(self->queue_append, pending);
        if (r == NULL) {
            Py_DECREF(started);
            goto fail;
        }
        Py_DECREF(r);
    }
    Py_DECREF(started);
    if (ends_auth)
        set_slot(exchange, p->exchange.before_auth, Py_False);
    if (slot_add(self->info, p->info.requests, count) < 0 || slot_add(self->info, p->info.bytes_in, n) < 0)
        goto fail;
    self->last_active = now;
    self->taken_requests++;
    /* forwarded as it came */
    PyObject *r = PyObject_CallOneArg(self->upstream_write, data);
    if (r == NULL)
        goto fail;
    Py_DECREF(r);
    if (!p->observe) {
        drop_request_frames(frames, count);
        Py_RETURN_NONE;
    }
    if (observed) {  /* then each frame to the hooks */
        PyObject *pendings[MAX_BATCH];
        Py_ssize_t starts[MAX_BATCH], sizes[MAX_BATCH];
        int keys[MAX_BATCH];
        for (int i = 0; i < count; i++) {
            pendings[i] = frames[i].pending;
            starts[i] = frames[i].start;
            sizes[i] = frames[i].size;
            keys[i] = frames[i].api_key;
        }
        self->observed_requests++;
        int err = observe_frames(self, data, p->request_forwarded, p->str_request_forwarded, p->str_request,
                                 pendings, starts, sizes, keys, count);
        drop_request_frames(frames, count);
        if (err < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    /* then observed: counted, per api and on the connection */
    Counts *c = p->counters->c;
    PyObject *per_api = SLOT(state, p->state.requests);
    for (int i = 0; i < count; i++) {
        int k = frames[i].api_key;
        c->requests[k][frames[i].version]++;
        c->request_bytes[k] += (unsigned long long)frames[i].size + 4;
        c->any[k] = 1;
        PyObject *api = SLOT(frames[i].entry, p->req.api);
        if (per_api != NULL && PyDict_CheckExact(per_api) && api != NULL) {
            /* the close line's count of requests by api name */
            PyObject *was = PyDict_GetItemWithError(per_api, api);
            long long before = 0;
            if (was != NULL && PyLong_CheckExact(was))
                before = PyLong_AsLongLong(was);
            PyObject *now_count = (was == NULL && PyErr_Occurred()) ? NULL : PyLong_FromLongLong(before + 1);
            int err = now_count == NULL || PyDict_SetItem(per_api, api, now_count) < 0;
            Py_XDECREF(now_count);
            if (err)
                goto fail;
        }
        if (frames[i].linked && link_request(self, &frames[i]) < 0)
            goto fail;
    }
    drop_request_frames(frames, count);
    Py_RETURN_NONE;
python:
    drop_request_frames(frames, count);
    return python_path(self->py_request, data);
fail:
    drop_request_frames(frames, count);
    return NULL;
}

/* ---------------------------------------------------------------------------------- */
/* responses                                                                            */

typedef struct {
    PyObject *pending;   /* new references, released when the read is done */
    PyObject *token;     /* borrowed from pending */
    PyObject *answer;    /* the response's entry (ResponseEntry or CapEntry), new reference */
    PyObject *tail;      /* a CapEntry's rewrite (borrowed from answer), or NULL */
    Py_ssize_t size;     /* the frame's body size, as received */
    Py_ssize_t sent;     /* the body size as sent (rewritten) */
    int api_key;
    long long api_version;
    long long request_size;
    double started;
    const unsigned char *body;
    int linked;          /* a Token: the hooks observe the answer (link_answer) */
    Py_ssize_t start;    /* where its body starts in the read */
} ResponseFrame;

static void drop_response_frames(ResponseFrame *frames, int count) {
    for (int i = 0; i < count; i++) {
        Py_XDECREF(frames[i].pending);
        Py_XDECREF(frames[i].answer);
    }
}

/* Whether a line of `token`'s and `answer`'s pieces is its dict's (request_line.composable). */
static int composable(PlanObject *p, PyObject *state, PyObject *token, long long answer_mask) {
    int ok = 1;
    long long request_mask = slot_ll(token, p->req.mask, &ok);
    if (!ok || (request_mask & answer_mask) || ((request_mask | answer_mask) & p->clash))
        return 0;
    PyObject *overlap = SLOT(token, p->req.overlap);
    if (overlap == NULL || !PyTuple_CheckExact(overlap))
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(overlap);
    if (n == 0)
        return 1;
    PyObject *log_fields = SLOT(state, p->state.log_fields);
    if (log_fields == NULL || !PyDict_CheckExact(log_fields))
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(overlap, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            return 0;
        PyObject *have = PyDict_GetItemWithError(log_fields, PyTuple_GET_ITEM(pair, 0));
        if (have == NULL) {
            PyErr_Clear();
            return 0;
        }
        int same = PyObject_RichCompareBool(have, PyTuple_GET_ITEM(pair, 1), Py_EQ);
        if (same != 1) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* The response memo's value (borrowed) for frame `f`: its key is the api key and version
 * and the frame but its correlation id (memo.response_key). */
static PyObject *response_memo_get(PlanObject *p, ResponseFrame *f) {
    char k[4] = {(char)((f->api_key >> 8) & 0xff), (char)(f->api_key & 0xff), (char)((f->api_version >> 8) & 0xff),
                 (char)(f->api_version & 0xff)};
    return memo_get(p->response_memo, &p->response_keys[f->api_key], k, 4, f->body + 4, f->size - 4);
}

/* The answer's entry (a new reference) for frame `f`, or NULL: Python's. */
static PyObject *response_entry(CoreObject *self, ResponseFrame *f) {
    PlanObject *p = self->plan;
    PyObject *state = self->state;
    const unsigned char *body = f->body;
    Py_ssize_t size = f->size;
    if (f->api_key == API_VERSIONS) {
        if (!p->api_versions_plain || f->api_version < -32768 || f->api_version > 32767)
            return NULL;
        char k[2] = {(char)((f->api_version >> 8) & 0xff), (char)(f->api_version & 0xff)};
        PyObject *cap = memo_get(p->cap_memo, &p->cap_key, k, 2, body + 4, size - 4);
        if (cap == NULL || Py_TYPE(cap) != p->cap_entry_type)
            return NULL;
        PyObject *fragment = SLOT(cap, p->cap.fragment), *tail = SLOT(cap, p->cap.tail);
        PyObject *ranges = SLOT(cap, p->cap.ranges);
        if (fragment == NULL || !PyBytes_CheckExact(fragment) || SLOT(cap, p->cap.errors) != Py_False
            || tail == NULL || (tail != Py_None && !PyBytes_CheckExact(tail)) || ranges == NULL
            || !PyDict_CheckExact(ranges))
            return NULL;
        /* what rewrite_response sets on the connection (and the hooks) is set already */
        if (PyDict_GET_SIZE(ranges) > 0) {
            if (SLOT(state, p->state.broker_ranges) != ranges)
                return NULL;
            PyObject *shared = PyObject_GetAttr(p->hooks, p->str_broker_ranges);
            if (shared == NULL) {
                PyErr_Clear();
                return NULL;
            }
            int same = shared == ranges;
            Py_DECREF(shared);
            if (!same)
                return NULL;
        }
        int ok = 1;
        long long mask = slot_ll(cap, p->cap.mask, &ok);
        if (!ok || !composable(p, state, f->token, mask))
            return NULL;
        if (tail != Py_None) {
            f->tail = tail;
            f->sent = 4 + PyBytes_GET_SIZE(tail);
        }
        return Py_NewRef(cap);
    }
    if (f->api_version < -32768 || f->api_version > 32767)
        return NULL;
    PyObject *entry = response_memo_get(p, f);
    if (entry == NULL || Py_TYPE(entry) != p->response_entry_type)
        return NULL;
    PyObject *fragment = SLOT(entry, p->resp.fragment);
    if (fragment == NULL || !PyBytes_CheckExact(fragment) || SLOT(entry, p->resp.errors) != Py_False)
        return NULL;
    int ok = 1;
    long long mask = slot_ll(entry, p->resp.mask, &ok);
    if (!ok || !composable(p, state, f->token, mask))
        return NULL;
    return Py_NewRef(entry);
}

/* A decimal integer, as Python's str() writes it; returns its length (at most 20). */
static int decimal(long long v, char *out) {
    char digits[24];
    int n = 0, len = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = digits[--n];
    return len;
}

/* An answer to a request a link read (its token a chain.Token): the C path may take it
 * when the link left no error, and its ask (if any) reads the skimmed answer. */
static int linked_answer_ok(CoreObject *self, ResponseFrame *f) {
    PlanObject *p = self->plan;
    if (!p->link_ok[f->api_key] || SLOT(f->token, p->token.decode_error) != Py_None)
        return 0;
    PyObject *ask = SLOT(f->token, p->token.ask);
    if (ask == NULL)
        return 0;
    if (ask == Py_None)
        return 1;
    /* `whole` is a class attribute of every ask (chain.py): looked up on its class alone,
     * a borrowed reference, no instance attribute machinery (anything but False: Python's) */
    return _PyType_Lookup(Py_TYPE(ask), p->str_whole) == Py_False;
}

/* A linked answer's memoised skimmed fields (a new reference to its ResponseEntry), or NULL. */
static PyObject *linked_entry(PlanObject *p, ResponseFrame *f) {
    if (f->api_key == API_VERSIONS || f->api_version < -32768 || f->api_version > 32767)
        return NULL;
    PyObject *entry = response_memo_get(p, f);
    if (entry == NULL || Py_TYPE(entry) != p->response_entry_type)
        return NULL;
    return Py_NewRef(entry);
}

/* ISO-8601 UTC with microseconds, the date part formatted once per second (as
 * request_log.Timestamp: time.time()'s seconds and its fraction's microseconds,
 * truncated). Returns its length (27). */
static time_t ts_second = -1;
static char ts_prefix[32];
static int ts_prefix_len;

static int timestamp(char *out) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double t = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
    time_t second = (time_t)t;
    if (second != ts_second) {
        struct tm tm;
        gmtime_r(&second, &tm);
        ts_prefix_len = (int)strftime(ts_prefix, sizeof(ts_prefix), "%Y-%m-%dT%H:%M:%S", &tm);
        ts_second = second;
    }
    long micro = (long)((t - (double)second) * 1000000.0);
    if (micro < 0)
        micro = 0;
    if (micro > 999999)
        micro = 999999;
    memcpy(out, ts_prefix, (size_t)ts_prefix_len);
    char *at = out + ts_prefix_len;
    *at++ = '.';
    for (int i = 5; i >= 0; i--) {
        at[i] = (char)('0' + micro % 10);
        micro /= 10;
    }
    at[6] = 'Z';
    return ts_prefix_len + 8;
}

/* round(ms, 3) as repr() writes it: the correctly rounded 3-decimal form (Python's own
 * dtoa, as round() uses), its trailing zeros dropped but one. */
static int latency_text(double ms, char *out, size_t room) {
    char *s = PyOS_double_to_string(ms, 'f', 3, 0, NULL);
    if (s == NULL)
        return -1;
    size_t len = strlen(s);
    char *dot = strchr(s, '.');
    if (dot != NULL) {
        while (len > (size_t)(dot - s) + 2 && s[len - 1] == '0')
            len--;
    }
    if (len + 1 > room || dot == NULL || len > 24) {
        PyMem_Free(s);
        PyErr_SetString(PyExc_OverflowError, "steady: a latency out of range");
        return -1;
    }
    memcpy(out, s, len);
    out[len] = 0;
    PyMem_Free(s);
    return (int)len;
}

static Py_ssize_t put(char *at, const char *text, Py_ssize_t len) {
    memcpy(at, text, (size_t)len);
    return len;
}

/* The line of an answered request, as request_line.compose makes it (a new bytes). */
/* `made` the request's memo entry, `answer` the answer's fields rendered: a fragment, or
 * with `raw` the JSON object (`{...}`) whose inside is the fragment. */
static PyObject *line_of(CoreObject *self, ResponseFrame *f, double latency, PyObject *made, PyObject *answer,
                         int raw) {
    PlanObject *p = self->plan;
    PyObject *state = self->state;
    PyObject *line_head = SLOT(state, p->state.line_head), *identity = SLOT(state, p->state.identity_fragment);
    PyObject *head = SLOT(made, p->req.head), *request = SLOT(made, p->req.fragment);
    if (line_head == NULL || !PyBytes_CheckExact(line_head) || identity == NULL || !PyBytes_CheckExact(identity)
        || head == NULL || !PyBytes_CheckExact(head) || request == NULL || !PyBytes_CheckExact(request)
        || answer == NULL || !PyBytes_CheckExact(answer)) {
        PyErr_SetString(PyExc_TypeError, "steady: a line's pieces are not bytes");
        return NULL;
    }
    char corr[16], req_size[24], resp_size[24], lat[32], ts[40];
    int corr_len = decimal(be32(f->body), corr);
    int req_len = decimal(f->request_size, req_size);
    int resp_len = decimal((long long)f->sent + 4, resp_size);
    int lat_len = latency_text(latency * 1000.0, lat, sizeof(lat));
    if (lat_len < 0)
        return NULL;
    int ts_len = timestamp(ts);
    const char *answer_at = PyBytes_AS_STRING(answer);
    Py_ssize_t answer_len = PyBytes_GET_SIZE(answer);
    int comma = 0;
    if (raw) {  /* `{...}`: its inside after a comma, or nothing for `{}` */
        if (answer_len < 2 || answer_at[0] != '{' || answer_at[answer_len - 1] != '}') {
            PyErr_SetString(PyExc_ValueError, "steady: an answer's fields are not a JSON object");
            return NULL;
        }
        answer_at += 1;
        answer_len -= 2;
        comma = answer_len > 0;
    }
    static const char k_corr[] = ",\"correlation_id\":", k_req[] = ",\"request_bytes\":",
                      k_lat[] = ",\"latency_ms\":", k_resp[] = ",\"response_bytes\":",
                      k_end[] = ",\"event\":\"request\",\"ts\":\"", k_close[] = "\"}";
#define KLEN(k) ((Py_ssize_t)sizeof(k) - 1)
    Py_ssize_t total = PyBytes_GET_SIZE(line_head) + PyBytes_GET_SIZE(head) + KLEN(k_corr) + corr_len
                       + PyBytes_GET_SIZE(identity) + KLEN(k_req) + req_len + KLEN(k_lat) + lat_len + KLEN(k_resp)
                       + resp_len + PyBytes_GET_SIZE(request) + comma + answer_len + KLEN(k_end) + ts_len
                       + KLEN(k_close);
    PyObject *line = PyBytes_FromStringAndSize(NULL, total);
    if (line == NULL)
        return NULL;
    char *at = PyBytes_AS_STRING(line);
    at += put(at, PyBytes_AS_STRING(line_head), PyBytes_GET_SIZE(line_head));
    at += put(at, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head));
    at += put(at, k_corr, KLEN(k_corr));
    at += put(at, corr, corr_len);
    at += put(at, PyBytes_AS_STRING(identity), PyBytes_GET_SIZE(identity));
    at += put(at, k_req, KLEN(k_req));
    at += put(at, req_size, req_len);
    at += put(at, k_lat, KLEN(k_lat));
    at += put(at, lat, lat_len);
    at += put(at, k_resp, KLEN(k_resp));
    at += put(at, resp_size, resp_len);
    at += put(at, PyBytes_AS_STRING(request), PyBytes_GET_SIZE(request));
    if (comma)
        *at++ = ',';
    at += put(at, answer_at, answer_len);
    at += put(at, k_end, KLEN(k_end));
    at += put(at, ts, ts_len);
    at += put(at, k_close, KLEN(k_close));
#undef KLEN
    return line;
}

/* Append a line to the request log's queue as LineSink.msg does, when its checks pass
 * at once (not full, not refusing, not due to wake the writer); else LineSink.msg. */
static int append_line(PlanObject *p, PyObject *line) {
    PyObject *sink = p->sink_obj;
    PyObject *lines = SLOT(sink, p->sink.lines), *refusing = SLOT(sink, p->sink.refusing);
    int ok = 1;
    long long queued = slot_ll(sink, p->sink.queued, &ok);
    long long full_at = slot_ll(sink, p->sink.full_at, &ok);
    long long wake_at = slot_ll(sink, p->sink.wake_at, &ok);
    if (ok && refusing == Py_None && lines != NULL && PyList_CheckExact(lines) && queued < full_at
        && queued < wake_at) {
        if (PyList_Append(lines, line) < 0)
            return -1;
        PyObject *nv = PyLong_FromLongLong(queued + PyBytes_GET_SIZE(line) + 1);
        if (nv == NULL)
            return -1;
        PyObject *old = SLOT(sink, p->sink.queued);
        SLOT(sink, p->sink.queued) = nv;
        Py_XDECREF(old);
        return 0;
    }
    PyObject *r = PyObject_CallOneArg(p->sink_msg, line);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static void count_answer(CountersObject *co, int k, unsigned long long size, double latency) {
    Counts *c = co->c;
    c->response_bytes[k] += size;
    c->duration_sum[k] += latency;
    int b = 0;
    while (b < co->nbounds - 1 && co->bounds[b] < latency)
        b++;
    c->buckets[k][b]++;
    c->any[k] = 1;
}

/* The answer to a request a link read: the link that asked reads it (its `answered`,
 * chain.py), then counted and logged here when its fields make a line from pieces (no
 * errors, the request's fields as its entry rendered them: `token.entry`), else by the
 * hooks (link_answer). */
static int linked_answer(CoreObject *self, ResponseFrame *f, double latency) {
    PlanObject *p = self->plan;
    PyObject *state = self->state, *token = f->token;
    PyObject *fields = SLOT(f->answer, p->resp.fields), *ask = SLOT(token, p->token.ask);
    if (fields == NULL || ask == NULL) {
        PyErr_SetString(PyExc_TypeError, "steady: a linked answer without its fields or ask");
        return -1;
    }
    Py_INCREF(fields);
    int own = 0;  /* the link made the fields: rendered now */
    if (ask != Py_None) {
        PyObject *asked_by = SLOT(token, p->token.asked_by);
        if (asked_by == NULL) {
            Py_DECREF(fields);
            PyErr_SetString(PyExc_TypeError, "steady: an ask without its link");
            return -1;
        }
        PyObject *args[6] = {asked_by, self->info, state, token, Py_None, fields};
        PyObject *made = PyObject_VectorcallMethod(p->str_answered, args, 6 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(fields);
        if (made == NULL)
            return -1;
        fields = made;
        own = 1;
    }
    PyObject *made = SLOT(token, p->token.entry), *line = NULL;
    int done = 0;
    if (PyDict_CheckExact(fields) && made != NULL && Py_TYPE(made) == p->request_entry_type
        && p->log_mode[f->api_key] == 1) {
        PyObject *errors = PyDict_GetItemWithError(fields, p->str_errors);
        PyObject *rendered = SLOT(made, p->req.fragment);
        if (errors != NULL && PyList_CheckExact(errors) && PyList_GET_SIZE(errors) == 0 && rendered != NULL
            && PyBytes_CheckExact(rendered)) {
            PyObject *piece = NULL;
            long long mask = 0;
            int ok = 1;
            if (own && fields == p->rendered_fields) {  /* the dict rendered last, unchanged */
                piece = Py_NewRef(p->rendered_piece);
                mask = p->rendered_mask;
            } else if (own) {
                PyObject *pair = PyObject_CallOneArg(p->render_fields, fields);
                if (pair == NULL) {
                    Py_DECREF(fields);
                    return -1;
                }
                if (PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2 && PyBytes_CheckExact(PyTuple_GET_ITEM(pair, 0))
                    && PyLong_CheckExact(PyTuple_GET_ITEM(pair, 1))) {
                    piece = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
                    mask = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1));
                    if (mask == -1 && PyErr_Occurred()) {
                        PyErr_Clear();
                        ok = 0;
                    } else {
                        Py_INCREF(fields);
                        Py_XSETREF(p->rendered_fields, fields);
                        Py_XSETREF(p->rendered_piece, Py_NewRef(piece));
                        p->rendered_mask = mask;
                    }
                }
                Py_DECREF(pair);
            } else {
                piece = Py_XNewRef(SLOT(f->answer, p->resp.fragment));
                mask = slot_ll(f->answer, p->resp.mask, &ok);
            }
            if (ok && piece != NULL && PyBytes_CheckExact(piece) && composable(p, state, made, mask)) {
                count_answer(p->counters, f->api_key, (unsigned long long)f->sent + 4, latency);
                line = line_of(self, f, latency, made, piece, own);
                done = line != NULL ? 1 : -1;
            }
            Py_XDECREF(piece);
        } else if (errors == NULL && PyErr_Occurred()) {
            PyErr_Clear();
        }
    }
    if (done == 0) {  /* the hooks finish it */
        PyObject *lat = PyFloat_FromDouble(latency), *sz = PyLong_FromSsize_t(f->sent + 4), *r = NULL;
        if (lat != NULL && sz != NULL) {  /* responded(..., entry=None, read=True) */
            PyObject *args[9] = {self->info, f->pending, token, state, lat, sz, fields, Py_None, Py_True};
            r = PyObject_Vectorcall(p->link_answer, args, 9, NULL);
        }
        Py_XDECREF(lat);
        Py_XDECREF(sz);
        Py_XDECREF(r);
        done = r != NULL ? 1 : -1;
    }
    Py_DECREF(fields);
    if (line != NULL) {
        int err = append_line(p, line);
        Py_DECREF(line);
        if (err < 0)
            return -1;
    }
    return done < 0 ? -1 : 0;
}

static PyObject *core_feed_response(CoreObject *self, PyObject *data) {
    PlanObject *p = self->plan;
    ResponseFrame frames[MAX_BATCH];
    int count = 0, rewrites = 0;
    /* observed: an answer of the read is not one the C path finishes from the memo, so
     * every answer of it goes to the hooks (response_forwarded) once the read went on,
     * as on the Python path; possible while every answer's api may be observed */
    int observing = p->response_forwarded != NULL && self->hook_failed != NULL;
    int observed = 0, observable = 1;
    if (!self->ready || !PyBytes_CheckExact(data) || self->exchange == NULL)
        return python_path(self->py_response, data);
    PyObject *exchange = self->exchange;
    if (!splitter_idle(p, self->responses) || SLOT(exchange, p->exchange.raw_sasl) != Py_None)
        return python_path(self->py_response, data);
    int ok = 1;
    long long replies_due = slot_ll(exchange, p->exchange.raw_replies_due, &ok);
    if (!ok || replies_due != 0)
        return python_path(self->py_response, data);
    PyObject *closing = PyObject_CallNoArgs(self->client_is_closing);
    if (closing == NULL)
        return NULL;
    int is_closing = PyObject_IsTrue(closing);
    Py_DECREF(closing);
    if (is_closing != 0)  /* closing (the Python path drops it), or an error */
        return is_closing < 0 ? NULL : python_path(self->py_response, data);
    Py_ssize_t in_flight = PyObject_Size(self->queue);
    if (in_flight < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), pos = 0;
    while (pos < n) {
        if (count == MAX_BATCH || n - pos < 4 || count >= in_flight)
            goto python;
        int32_t size = be32(buf + pos);
        if (size < 4 || size > self->max_response_frame || (Py_ssize_t)size > n - pos - 4)
            goto python;
        ResponseFrame *f = &frames[count];
        f->pending = PySequence_GetItem(self->queue, count);
        f->answer = NULL;
        f->tail = NULL;
        if (f->pending == NULL)
            goto fail;
        count++;
        PyObject *pending = f->pending;
        if (Py_TYPE(pending) != p->pending_type || SLOT(pending, p->pending.reply) != Py_None
            || SLOT(pending, p->pending.rewritten) != Py_None)
            goto python;
        f->body = buf + pos + 4;
        f->start = pos + 4;
        f->size = f->sent = size;
        long long corr = slot_ll(pending, p->pending.correlation_id, &ok);
        long long api_key = slot_ll(pending, p->pending.api_key, &ok);
        f->api_version = slot_ll(pending, p->pending.api_version, &ok);
        f->request_size = slot_ll(pending, p->pending.request_size, &ok);
        PyObject *started = SLOT(pending, p->pending.started);
        PyObject *token = SLOT(pending, p->pending.token);
        if (!ok || corr != (long long)be32(f->body) || api_key < 0 || api_key >= MAX_API || started == NULL
            || !PyFloat_CheckExact(started) || token == NULL)
            goto python;
        f->api_key = (int)api_key;
        f->started = PyFloat_AS_DOUBLE(started);
        f->token = token;
        f->linked = 0;
        pos += 4 + (Py_ssize_t)size;
        int memo_ok = size <= MEMO_MAX_FRAME && p->response_ok[api_key];
        int can_observe = observing && p->observed_response_ok[api_key];
        if (!memo_ok && !can_observe)
            goto python;
        observable &= can_observe;
        if (!p->observe)  /* forwarded and paired, nothing else */
            continue;
        if (observed || !memo_ok) {
            observed = 1;
            continue;
        }
        /* the memo's answer, or (none: declined) the hooks' if it may be observed */
        int declined = 0;
        f->linked = Py_TYPE(token) == p->token_type;
        if (f->linked) {
            if (!linked_answer_ok(self, f))
                declined = 1;
            else if ((f->answer = linked_entry(p, f)) == NULL)
                declined = 1;
        } else {
            PyObject *rendered = Py_TYPE(token) == p->request_entry_type && p->log_mode[api_key] != 2
                                     ? SLOT(token, p->req.fragment)  /* rendered when the memo met it again */
                                     : NULL;
            if (rendered == NULL || !PyBytes_CheckExact(rendered) || (f->answer = response_entry(self, f)) == NULL)
                declined = 1;
            else if (f->tail != NULL)
                rewrites++;
        }
        if (declined) {
            if (PyErr_Occurred())
                goto fail;
            if (!can_observe)
                goto python;
            observed = 1;
        }
    }
    if (count == 0)
        goto python;
    if (observed) {
        if (!observable)
            goto python;
        for (int i = 0; i < count; i++) {  /* the hooks find each answer in the memo themselves */
            Py_CLEAR(frames[i].answer);
            frames[i].tail = NULL;
            frames[i].linked = 0;
        }
        rewrites = 0;
    }
    if (count < in_flight) {
        /* a reply the proxy made itself next in line: the Python path sends it */
        PyObject *next = PySequence_GetItem(self->queue, count);
        if (next == NULL)
            goto fail;
        int due = Py_TYPE(next) != p->pending_type || SLOT(next, p->pending.reply) != Py_None;
        Py_DECREF(next);
        if (due)
            goto python;
    }
    /* the exchange: each answer takes its request off the queue */
    for (int i = 0; i < count; i++) {
        PyObject *taken = PyObject_CallNoArgs(self->queue_popleft);
        if (taken == NULL)
            goto fail;
        int same = taken == frames[i].pending;
        Py_DECREF(taken);
        if (!same) {
            PyErr_SetString(PyExc_RuntimeError, "steady: the pending queue changed under a read");
            goto fail;
        }
    }
    double now = monotonic();
    if (slot_add(self->info, p->info.responses, count) < 0 || slot_add(self->info, p->info.bytes_out, n) < 0)
        goto fail;
    self->last_active = now;
    self->taken_responses++;
    /* forwarded: as it came, or with its ApiVersions answers rewritten */
    PyObject *out = data;
    if (rewrites) {
        Py_ssize_t total = 0;
        for (int i = 0; i < count; i++)
            total += 4 + frames[i].sent;
        out = PyBytes_FromStringAndSize(NULL, total);
        if (out == NULL)
            goto fail;
        unsigned char *at = (unsigned char *)PyBytes_AS_STRING(out);
        for (int i = 0; i < count; i++) {
            ResponseFrame *f = &frames[i];
            uint32_t sent = (uint32_t)f->sent;
            at[0] = (unsigned char)(sent >> 24);
            at[1] = (unsigned char)(sent >> 16);
            at[2] = (unsigned char)(sent >> 8);
            at[3] = (unsigned char)sent;
            if (f->tail != NULL) {
                memcpy(at + 4, f->body, 4);
                memcpy(at + 8, PyBytes_AS_STRING(f->tail), (size_t)PyBytes_GET_SIZE(f->tail));
            } else {
                memcpy(at + 4, f->body, (size_t)f->size);
            }
            at += 4 + f->sent;
        }
    }
    PyObject *r = PyObject_CallOneArg(self->client_write, out);
    if (out != data)
        Py_DECREF(out);
    if (r == NULL)
        goto fail;
    Py_DECREF(r);
    if (!p->observe) {
        drop_response_frames(frames, count);
        Py_RETURN_NONE;
    }
    if (observed) {  /* then each answer to the hooks */
        PyObject *pendings[MAX_BATCH];
        Py_ssize_t starts[MAX_BATCH], sizes[MAX_BATCH];
        int keys[MAX_BATCH];
        for (int i = 0; i < count; i++) {
            pendings[i] = frames[i].pending;
            starts[i] = frames[i].start;
            sizes[i] = frames[i].size;
            keys[i] = frames[i].api_key;
        }
        self->observed_responses++;
        int err = observe_frames(self, data, p->response_forwarded, p->str_response_forwarded, p->str_response,
                                 pendings, starts, sizes, keys, count);
        drop_response_frames(frames, count);
        if (err < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    /* then observed: counted, and logged */
    CountersObject *co = p->counters;
    for (int i = 0; i < count; i++) {
        ResponseFrame *f = &frames[i];
        int k = f->api_key;
        double latency = now - f->started;
        if (f->linked) {
            if (linked_answer(self, f, latency) < 0)
                goto fail;
            continue;
        }
        count_answer(co, k, (unsigned long long)f->sent + 4, latency);
        if (p->log_mode[k] == 1) {
            PyObject *piece = Py_TYPE(f->answer) == p->cap_entry_type ? SLOT(f->answer, p->cap.fragment)
                                                                     : SLOT(f->answer, p->resp.fragment);
            PyObject *line = line_of(self, f, latency, f->token, piece, 0);
            if (line == NULL)
                goto fail;
            int err = append_line(p, line);
            Py_DECREF(line);
            if (err < 0)
                goto fail;
        }
    }
    drop_response_frames(frames, count);
    Py_RETURN_NONE;
python:
    drop_response_frames(frames, count);
    return python_path(self->py_response, data);
fail:
    drop_response_frames(frames, count);
    return NULL;
}

static PyObject *core_get_ready(CoreObject *self, void *Py_UNUSED(unused)) { return PyBool_FromLong(self->ready); }

static int core_set_ready(CoreObject *self, PyObject *value, void *Py_UNUSED(unused)) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "ready cannot be deleted");
        return -1;
    }
    int truth = PyObject_IsTrue(value);
    if (truth < 0)
        return -1;
    self->ready = truth && self->exchange != NULL && self->upstream_write != NULL;
    return 0;
}

static PyObject *core_get_last_active(CoreObject *self, void *Py_UNUSED(unused)) { return PyFloat_FromDouble(self->last_active); }

static PyObject *core_get_taken(CoreObject *self, void *Py_UNUSED(unused)) {
    return Py_BuildValue("(KK)", self->taken_requests, self->taken_responses);
}

static PyObject *core_get_observed(CoreObject *self, void *Py_UNUSED(unused)) {
    return Py_BuildValue("(KK)", self->observed_requests, self->observed_responses);
}

static PyGetSetDef core_getset[] = {
    {"ready", (getter)core_get_ready, (setter)core_set_ready,
     "Whether the C path may take a read (the connection is in its steady state).", NULL},
    {"last_active", (getter)core_get_last_active, NULL,
     "time.monotonic() of the last read the C path took (0.0: none).", NULL},
    {"taken", (getter)core_get_taken, NULL, "(requests, responses): the reads the C path took.", NULL},
    {"observed", (getter)core_get_observed, NULL,
     "(requests, responses): of the reads the C path took, those whose frames it handed to the hooks.", NULL},
    {NULL},
};

static PyMethodDef core_methods[] = {
    {"feed_request", (PyCFunction)core_feed_request, METH_O, "A read from the client."},
    {"feed_response", (PyCFunction)core_feed_response, METH_O, "A read from the broker."},
    {"bind", (PyCFunction)core_bind, METH_VARARGS,
     "bind(exchange, requests, responses, info, state, client[, hook_failed])"},
    {"set_upstream", (PyCFunction)core_set_upstream, METH_O, "The broker's transport, once connected."},
    {"release", (PyCFunction)core_release, METH_NOARGS, "The connection closed: drop its objects."},
    {NULL},
};

static int core_traverse(CoreObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->plan);
    Py_VISIT(self->py_request);
    Py_VISIT(self->py_response);
    Py_VISIT(self->exchange);
    Py_VISIT(self->queue);
    Py_VISIT(self->queue_append);
    Py_VISIT(self->queue_popleft);
    Py_VISIT(self->requests);
    Py_VISIT(self->responses);
    Py_VISIT(self->info);
    Py_VISIT(self->state);
    Py_VISIT(self->client_write);
    Py_VISIT(self->client_is_closing);
    Py_VISIT(self->upstream_write);
    Py_VISIT(self->hook_failed);
    return 0;
}

static int core_clear(CoreObject *self) {
    PyObject *r = core_release(self, NULL);
    Py_XDECREF(r);
    Py_CLEAR(self->plan);
    Py_CLEAR(self->py_request);
    Py_CLEAR(self->py_response);
    return 0;
}

static void core_dealloc(CoreObject *self) {
    PyObject_GC_UnTrack(self);
    core_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "proxy._steady.Core",
    .tp_basicsize = sizeof(CoreObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Core(plan, python_request, python_response): one connection's C path.",
    .tp_new = core_new,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_methods = core_methods,
    .tp_getset = core_getset,
};

/* ---- The lag tracker's walks of a Fetch (proxy/observe/lag/tracker.py) -------------
 *
 * CONTRACT. Two functions the lag tracker calls in place of its own Python loops, doing
 * exactly what those loops do, on the same objects, in the same order (the Python loops
 * stay: the reference, and the path where this extension is not built or
 * KAFKALENS_PURE_CODEC=1; tests/observe/test_lag_accel.py holds the two to the same
 * tables, counters and line fields):
 *
 * fetch_offsets(topics, clean_name, limit, offsets) -> None: a Fetch request's
 *   positions, LagTracker.fetch_ask's loop: for each topic of `topics` (a decoded
 *   request's `topics`, a sequence of dicts), its name is clean_name(topic, limit) and
 *   offsets[(name, partition.get("partition"))] = partition.get("fetch_offset", -1) for
 *   each partition of topic.get("partitions") or ().
 *
 * fetch_positions(responses, clean_name, limit, table, who, group, offsets, stats,
 *   marks, read_committed, now, logged, left, max_tracked, entry) -> (dropped, moved,
 *   full): a Fetch answer's positions, LagTracker.fetch_done's loop over `responses`
 *   (the answer decoded whole: a sequence of topic dicts, each with a "partitions"
 *   sequence of dicts): each partition without error and with a high watermark >= 0
 *   updates (or puts, while `table` has fewer than max_tracked entries) the Entry of
 *   (who, name, index) in `table` and the watermark Entry of (name, index) in `marks`,
 *   and, while `left` lasts, appends its line dict to `logged`. Returns how many
 *   partitions were not logged (`left` spent), how many watermarks were put or moved
 *   (LagTracker.marks_moved), and how many entries found no room (LagTracker.dropped).
 *
 * Both read only dicts the codec decoded (a missing key is its `get` default, as in
 * Python; a mapping that is not exactly a dict is asked through its own `get`), never
 * the frame's bytes; numbers are compared and subtracted as Python ints (a long long
 * comparison when both fit, Python's own otherwise: no overflow whatever a broker
 * sends). Every object they keep a borrowed reference to is held for as long as a Python
 * call (clean_name, Entry) may run. What Python would raise (a TypeError comparing a
 * value that is not a number, MemoryError) is raised, with the tables as far as the walk
 * got, as the Python loop would leave them.
 */

enum {
    K_PARTITIONS, K_PARTITION, K_FETCH_OFFSET, K_HIGH, K_ERROR, K_INDEX, K_STABLE, K_START,
    K_NEXT_OFFSET, K_GROUP, K_OFFSET, K_LAG, K_SEEN, K_TOPIC, K_GET, K_COUNT
};
static PyObject *lag_str[K_COUNT];  /* the names above, interned (lag_init) */
static const char *lag_names[K_COUNT] = {
    "partitions", "partition", "fetch_offset", "high_watermark", "error_code", "partition_index",
    "last_stable_offset", "log_start_offset", "next_offset", "group", "offset", "lag", "seen", "topic", "get",
};
static PyObject *lag_zero, *lag_minus_one, *lag_empty;
/* The entry class whose slots (group, offset, lag, seen) were found (find_slot), and
 * their offsets; an entry of another class is written through setattr. */
static PyTypeObject *lag_entry_type;
static Py_ssize_t lag_entry_slots[4];
static int lag_entry_slotted;

static void lag_entry_class(PyObject *cls) {
    if ((PyObject *)lag_entry_type == cls || !PyType_Check(cls))
        return;
    Py_XSETREF(lag_entry_type, (PyTypeObject *)Py_NewRef(cls));
    static const char *names[4] = {"group", "offset", "lag", "seen"};
    lag_entry_slotted = 1;
    for (int i = 0; i < 4 && lag_entry_slotted; i++)
        if (find_slot(lag_entry_type, names[i], &lag_entry_slots[i]) < 0) {
            PyErr_Clear();
            lag_entry_slotted = 0;
        }
}

/* mapping.get(key, default), a new reference (NULL: an error). */
static PyObject *lag_get(PyObject *mapping, int key, PyObject *dflt) {
    if (PyDict_CheckExact(mapping)) {
        PyObject *v = PyDict_GetItemWithError(mapping, lag_str[key]);
        if (v == NULL) {
            if (PyErr_Occurred())
                return NULL;
            v = dflt;
        }
        Py_INCREF(v);
        return v;
    }
    return PyObject_CallMethodObjArgs(mapping, lag_str[K_GET], lag_str[key], dflt, NULL);
}

/* a <op> b as Python compares them: 1, 0, or -1 (an error). */
static int lag_compare(PyObject *a, PyObject *b, int op) {
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
        int oa = 0, ob = 0;
        long long x = PyLong_AsLongLongAndOverflow(a, &oa);
        long long y = PyLong_AsLongLongAndOverflow(b, &ob);
        if (!oa && !ob) {
            switch (op) {
            case Py_LT: return x < y;
            case Py_GT: return x > y;
            case Py_GE: return x >= y;
            case Py_NE: return x != y;
            default: break;
            }
        }
    }
    return PyObject_RichCompareBool(a, b, op);
}

static PyObject *lag_fetch_offsets(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "fetch_offsets(topics, clean_name, limit, offsets)");
        return NULL;
    }
    PyObject *clean_name = args[1], *limit = args[2], *offsets = args[3];
    if (!PyDict_Check(offsets)) {
        PyErr_SetString(PyExc_TypeError, "fetch_offsets: offsets is not a dict");
        return NULL;
    }
    PyObject *topics = PySequence_Fast(args[0], "fetch_offsets: topics is not a sequence");
    if (topics == NULL)
        return NULL;
    PyObject *topic = NULL, *name = NULL, *partitions = NULL, *partition = NULL;
    for (Py_ssize_t t = 0; t < PySequence_Fast_GET_SIZE(topics); t++) {
        topic = PySequence_Fast_GET_ITEM(topics, t);
        Py_INCREF(topic);
        PyObject *call[2] = {topic, limit};
        name = PyObject_Vectorcall(clean_name, call, 2, NULL);
        if (name == NULL)
            goto fail;
        PyObject *found = lag_get(topic, K_PARTITIONS, Py_None);
        if (found == NULL)
            goto fail;
        int any = PyObject_IsTrue(found);
        if (any <= 0) {
            Py_DECREF(found);
            if (any < 0)
                goto fail;
            Py_CLEAR(name);
            Py_CLEAR(topic);
            continue;
        }
        partitions = PySequence_Fast(found, "fetch_offsets: partitions is not a sequence");
        Py_DECREF(found);
        if (partitions == NULL)
            goto fail;
        for (Py_ssize_t p = 0; p < PySequence_Fast_GET_SIZE(partitions); p++) {
            partition = PySequence_Fast_GET_ITEM(partitions, p);
            Py_INCREF(partition);
            PyObject *index = lag_get(partition, K_PARTITION, Py_None);
            if (index == NULL)
                goto fail;
            PyObject *offset = lag_get(partition, K_FETCH_OFFSET, lag_minus_one);
            if (offset == NULL) {
                Py_DECREF(index);
                goto fail;
            }
            PyObject *where = PyTuple_Pack(2, name, index);
            Py_DECREF(index);
            int r = where == NULL ? -1 : PyDict_SetItem(offsets, where, offset);
            Py_XDECREF(where);
            Py_DECREF(offset);
            if (r < 0)
                goto fail;
            Py_CLEAR(partition);
        }
        Py_CLEAR(partitions);
        Py_CLEAR(name);
        Py_CLEAR(topic);
    }
    Py_DECREF(topics);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(partition);
    Py_XDECREF(partitions);
    Py_XDECREF(name);
    Py_XDECREF(topic);
    Py_DECREF(topics);
    return NULL;
}

/* One partition of a Fetch answer (fetch_positions' body): 0, or -1 (an error). */
typedef struct {
    PyObject *name, *table, *who, *group, *offsets, *stats, *marks, *now, *logged, *entry;
    int read_committed;
    Py_ssize_t left, max_tracked, dropped, moved, full;
} LagWalk;

/* entry.<key> = value, key one of K_GROUP, K_OFFSET, K_LAG, K_SEEN: straight into its
 * slot when it is of the entry class, whose slots were found. */
static int lag_set(PyObject *obj, int key, PyObject *value) {
    if (lag_entry_slotted && Py_TYPE(obj) == lag_entry_type) {
        set_slot(obj, lag_entry_slots[key - K_GROUP], value);
        return 0;
    }
    return PyObject_SetAttr(obj, lag_str[key], value);
}

/* entry.offset, a new reference (an unset slot raises, as getattr does). */
static PyObject *lag_offset(PyObject *obj) {
    if (lag_entry_slotted && Py_TYPE(obj) == lag_entry_type && SLOT(obj, lag_entry_slots[1]) != NULL)
        return Py_NewRef(SLOT(obj, lag_entry_slots[1]));
    return PyObject_GetAttr(obj, lag_str[K_OFFSET]);
}

static int lag_partition(LagWalk *w, PyObject *partition) {
    int rc = -1, c;
    PyObject *high = NULL, *error = NULL, *index = NULL, *where = NULL, *key = NULL, *entry = NULL, *start = NULL;
    PyObject *position = NULL, *returned = NULL, *next = NULL, *stable = NULL, *lag = NULL, *made = NULL;
    PyObject *mark = NULL, *mark_offset = NULL, *log_start = NULL, *line = NULL;
    if ((high = lag_get(partition, K_HIGH, lag_minus_one)) == NULL || (error = lag_get(partition, K_ERROR, Py_None)) == NULL)
        goto done;
    if ((c = PyObject_IsTrue(error)) != 0 || (c = lag_compare(high, lag_zero, Py_LT)) != 0) {
        rc = c < 0 ? -1 : 0;
        goto done;
    }
    if ((index = lag_get(partition, K_INDEX, lag_minus_one)) == NULL || (where = PyTuple_Pack(2, w->name, index)) == NULL
        || (key = PyTuple_Pack(3, w->who, w->name, index)) == NULL)
        goto done;
    Py_hash_t hash = PyObject_Hash(where);  /* once for its three tables */
    if (hash == -1)
        goto done;
    /* a value None is no value: what dict.get says of a missing key */
    entry = PyDict_GetItemWithError(w->table, key);
    if (entry == NULL && PyErr_Occurred())
        goto done;
    entry = entry == Py_None ? NULL : Py_XNewRef(entry);
    start = _PyDict_GetItem_KnownHash(w->offsets, where, hash);
    if (start == NULL || start == Py_None) {
        start = NULL;
        if (PyErr_Occurred())
            goto done;
        if (entry == NULL) {  /* an incremental fetch session left it out, and it is not known */
            rc = 0;
            goto done;
        }
        if ((start = lag_offset(entry)) == NULL)
            goto done;
    } else {
        Py_INCREF(start);
    }
    position = start;
    Py_INCREF(position);
    PyObject *stats = _PyDict_GetItem_KnownHash(w->stats, where, hash);
    if (stats == NULL && PyErr_Occurred())
        goto done;
    if (stats != NULL && stats != Py_None) {
        returned = Py_NewRef(stats);
        if ((next = PyObject_GetAttr(returned, lag_str[K_NEXT_OFFSET])) == NULL || (c = lag_compare(next, start, Py_GT)) < 0)
            goto done;
        if (c)
            Py_SETREF(position, Py_NewRef(next));
    }
    if ((stable = lag_get(partition, K_STABLE, lag_minus_one)) == NULL)
        goto done;
    PyObject *end = high;
    if (w->read_committed) {
        if ((c = lag_compare(stable, lag_zero, Py_GE)) < 0)
            goto done;
        if (c)
            end = stable;
    }
    if ((c = lag_compare(end, position, Py_GT)) < 0)
        goto done;
    lag = c ? PyNumber_Subtract(end, position) : Py_NewRef(lag_zero);
    if (lag == NULL)
        goto done;
    if (entry != NULL) {
        if (lag_set(entry, K_GROUP, w->group) < 0 || lag_set(entry, K_OFFSET, position) < 0 || lag_set(entry, K_LAG, lag) < 0
            || lag_set(entry, K_SEEN, w->now) < 0)
            goto done;
    } else if (PyDict_GET_SIZE(w->table) < w->max_tracked) {
        PyObject *call[4] = {w->group, position, lag, w->now};
        if ((made = PyObject_Vectorcall(w->entry, call, 4, NULL)) == NULL || PyDict_SetItem(w->table, key, made) < 0)
            goto done;
        Py_CLEAR(made);
    } else {
        w->full++;
    }
    /* the broker's word as of now: it may be lower than before (a topic recreated) */
    mark = _PyDict_GetItem_KnownHash(w->marks, where, hash);
    if (mark == NULL || mark == Py_None) {
        mark = NULL;
        if (PyErr_Occurred())
            goto done;
        if (PyDict_GET_SIZE(w->marks) < w->max_tracked) {
            PyObject *call[4] = {lag_empty, high, lag_zero, w->now};
            /* PyDict_SetItem hashes `where` again, once per new watermark: CPython 3.13
             * no longer declares _PyDict_SetItem_KnownHash for extensions. */
            if ((made = PyObject_Vectorcall(w->entry, call, 4, NULL)) == NULL || PyDict_SetItem(w->marks, where, made) < 0)
                goto done;
            w->moved++;
        } else {
            w->full++;
        }
    } else {
        Py_INCREF(mark);
        if (lag_set(mark, K_SEEN, w->now) < 0 || (mark_offset = lag_offset(mark)) == NULL
            || (c = lag_compare(mark_offset, high, Py_NE)) < 0)
            goto done;
        if (c) {
            if (lag_set(mark, K_OFFSET, high) < 0)
                goto done;
            w->moved++;
        }
    }
    if (w->left > 0) {
        w->left--;
        if ((log_start = lag_get(partition, K_START, lag_minus_one)) == NULL || (line = _PyDict_NewPresized(8)) == NULL)
            goto done;
        int stable_known = lag_compare(stable, lag_zero, Py_GE);
        int start_known = stable_known < 0 ? -1 : lag_compare(log_start, lag_zero, Py_GE);
        if (start_known < 0 || PyDict_SetItem(line, lag_str[K_TOPIC], w->name) < 0
            || PyDict_SetItem(line, lag_str[K_PARTITION], index) < 0 || PyDict_SetItem(line, lag_str[K_FETCH_OFFSET], start) < 0
            || PyDict_SetItem(line, lag_str[K_NEXT_OFFSET], position) < 0 || PyDict_SetItem(line, lag_str[K_HIGH], high) < 0
            || PyDict_SetItem(line, lag_str[K_STABLE], stable_known ? stable : Py_None) < 0
            || PyDict_SetItem(line, lag_str[K_START], start_known ? log_start : Py_None) < 0
            || PyDict_SetItem(line, lag_str[K_LAG], lag) < 0 || PyList_Append(w->logged, line) < 0)
            goto done;
    } else {
        w->dropped++;
    }
    rc = 0;
done:
    Py_XDECREF(high);
    Py_XDECREF(error);
    Py_XDECREF(index);
    Py_XDECREF(where);
    Py_XDECREF(key);
    Py_XDECREF(entry);
    Py_XDECREF(start);
    Py_XDECREF(position);
    Py_XDECREF(returned);
    Py_XDECREF(next);
    Py_XDECREF(stable);
    Py_XDECREF(lag);
    Py_XDECREF(made);
    Py_XDECREF(mark);
    Py_XDECREF(mark_offset);
    Py_XDECREF(log_start);
    Py_XDECREF(line);
    return rc;
}

static PyObject *lag_fetch_positions(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "fetch_positions(responses, clean_name, limit, table, who, group, offsets, "
                                         "stats, marks, read_committed, now, logged, left, max_tracked, entry)");
        return NULL;
    }
    LagWalk w = {
        .table = args[3], .who = args[4], .group = args[5], .offsets = args[6], .stats = args[7], .marks = args[8],
        .now = args[10], .logged = args[11], .entry = args[14],
    };
    if (!PyDict_CheckExact(w.table) || !PyDict_CheckExact(w.offsets) || !PyDict_CheckExact(w.stats)
        || !PyDict_CheckExact(w.marks) || !PyList_Check(w.logged)) {
        PyErr_SetString(PyExc_TypeError, "fetch_positions: table, offsets, stats and marks are dicts, logged a list");
        return NULL;
    }
    if ((w.read_committed = PyObject_IsTrue(args[9])) < 0)
        return NULL;
    lag_entry_class(w.entry);
    w.left = PyLong_AsSsize_t(args[12]);
    w.max_tracked = PyLong_AsSsize_t(args[13]);
    if ((w.left == -1 || w.max_tracked == -1) && PyErr_Occurred())
        return NULL;
    PyObject *clean_name = args[1], *limit = args[2];
    PyObject *topics = PySequence_Fast(args[0], "fetch_positions: responses is not a sequence");
    if (topics == NULL)
        return NULL;
    PyObject *topic = NULL, *partitions = NULL;
    for (Py_ssize_t t = 0; t < PySequence_Fast_GET_SIZE(topics); t++) {
        topic = PySequence_Fast_GET_ITEM(topics, t);
        Py_INCREF(topic);
        PyObject *call[2] = {topic, limit};
        if ((w.name = PyObject_Vectorcall(clean_name, call, 2, NULL)) == NULL)
            goto fail;
        PyObject *found = lag_get(topic, K_PARTITIONS, Py_None);
        if (found == NULL)
            goto fail;
        int any = PyObject_IsTrue(found);
        if (any > 0)
            partitions = PySequence_Fast(found, "fetch_positions: partitions is not a sequence");
        Py_DECREF(found);
        if (any < 0 || (any > 0 && partitions == NULL))
            goto fail;
        for (Py_ssize_t p = 0; partitions != NULL && p < PySequence_Fast_GET_SIZE(partitions); p++) {
            PyObject *partition = PySequence_Fast_GET_ITEM(partitions, p);
            Py_INCREF(partition);
            int r = lag_partition(&w, partition);
            Py_DECREF(partition);
            if (r < 0)
                goto fail;
        }
        Py_CLEAR(partitions);
        Py_CLEAR(w.name);
        Py_CLEAR(topic);
    }
    Py_DECREF(topics);
    return Py_BuildValue("(nnn)", w.dropped, w.moved, w.full);
fail:
    Py_XDECREF(partitions);
    Py_XDECREF(w.name);
    Py_XDECREF(topic);
    Py_DECREF(topics);
    return NULL;
}

/* produce_acks(frame, version) -> int | None: the acks the C path reads of a Produce
 * request (`frame` the whole body but its length prefix), None where it leaves the
 * read to the Python path (what leads to acks is cut or malformed); for the tests,
 * which hold it to codec/peek.py's. */
static PyObject *steady_produce_acks(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer frame;
    int version, acks = 0;
    if (!PyArg_ParseTuple(args, "y*i", &frame, &version))
        return NULL;
    int found = frame.len >= 8 && produce_acks((const unsigned char *)frame.buf, frame.len, version, &acks);
    PyBuffer_Release(&frame);
    if (!found)
        Py_RETURN_NONE;
    return PyLong_FromLong(acks);
}

static PyMethodDef steady_functions[] = {
    {"produce_acks", (PyCFunction)steady_produce_acks, METH_VARARGS,
     "produce_acks(frame, version): a Produce request's acks as the C path reads them, or None."},
    {"fetch_offsets", (PyCFunction)(void (*)(void))lag_fetch_offsets, METH_FASTCALL,
     "A Fetch request's positions into `offsets` (LagTracker.fetch_ask's loop)."},
    {"fetch_positions", (PyCFunction)(void (*)(void))lag_fetch_positions, METH_FASTCALL,
     "A Fetch answer's positions (LagTracker.fetch_done's loop): (dropped, moved, full)."},
    {NULL, NULL, 0, NULL},
};

static int lag_init(void) {
    for (int i = 0; i < K_COUNT; i++)
        if ((lag_str[i] = PyUnicode_InternFromString(lag_names[i])) == NULL)
            return -1;
    lag_zero = PyLong_FromLong(0);
    lag_minus_one = PyLong_FromLong(-1);
    lag_empty = PyUnicode_FromString("");
    return lag_zero == NULL || lag_minus_one == NULL || lag_empty == NULL ? -1 : 0;
}

static struct PyModuleDef steady_module = {
    PyModuleDef_HEAD_INIT, "proxy._steady", "A kafkalens connection's steady state in C (see proxy/steady.py).",
    -1, steady_functions, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__steady(void) {
    if (PyType_Ready(&CountersType) < 0 || PyType_Ready(&PlanType) < 0 || PyType_Ready(&CoreType) < 0
        || lag_init() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&steady_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "Counters", (PyObject *)&CountersType) < 0
        || PyModule_AddObjectRef(module, "Plan", (PyObject *)&PlanType) < 0
        || PyModule_AddObjectRef(module, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
