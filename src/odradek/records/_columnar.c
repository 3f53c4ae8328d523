/* Records of RecordBatch v2 decoded straight into Arrow column buffers.
 *
 * How it works: a ColumnBuilder owns growable buffers laid out as Arrow arrays want them
 * (a validity bitmap, int32 value offsets and the value bytes of each binary column,
 * int64 offsets and timestamps, int32 timestamp types, and for headers a list of
 * struct<key: string, value: binary>). ``add`` walks the records section of one
 * (decompressed) batch and appends every record whose offset lies in [lo, hi); ``finish``
 * hands the buffers over as read-only memoryviews of the builder's own memory (wrapped
 * zero-copy by pyarrow) and starts afresh.
 *
 * The rules are those of Kafka's DefaultRecord.readFrom and of odradek.records.batch
 * .iter_records, which the Python fallback in odradek.records.columnar uses and against
 * which this file is property-tested: a record length below 6 or past the end is
 * corrupt; a negative key or value length means null; a negative header count, a null
 * header key, a record whose fields do not fill its length exactly, or bytes left after
 * ``count`` records are corrupt. Varints are zig-zag, at most 5 (int32) or 10 (int64)
 * bytes. Input is untrusted: every read is bounds-checked and errors raise ValueError.
 * The GIL is released while a batch is walked.
 *
 * Beside the builder, transactional_batch_in: the Produce handler's scan for the
 * transactional bit in a request without a transactional id (see its comment below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *p;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (extra > PY_SSIZE_T_MAX - b->len) return -1;
    Py_ssize_t need = b->len + extra;
    if (need <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < need) {
        if (cap > PY_SSIZE_T_MAX / 2) { cap = need; break; }
        cap *= 2;
    }
    char *p = (char *)PyMem_RawRealloc(b->p, (size_t)cap);
    if (p == NULL) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static void buf_free(Buf *b) {
    PyMem_RawFree(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* One Arrow binary (or string) column: validity bitmap, int32 offsets, data. */
typedef struct {
    Buf validity;
    Buf offsets;
    Buf data;
    Py_ssize_t length;
    Py_ssize_t nulls;
} BinCol;

static void bincol_free(BinCol *c) {
    buf_free(&c->validity);
    buf_free(&c->offsets);
    buf_free(&c->data);
    c->length = c->nulls = 0;
}

static int bincol_init(BinCol *c) {
    memset(c, 0, sizeof(*c));
    if (buf_reserve(&c->offsets, 4) < 0) return -1;
    memset(c->offsets.p, 0, 4);
    c->offsets.len = 4;
    return 0;
}

typedef enum { OK = 0, ERR_MEMORY = 1, ERR_OVERFLOW = 2 } Status;

typedef struct {
    Py_ssize_t validity, offsets, data, length, nulls;
} BinMark;

static BinMark bincol_mark(const BinCol *c) {
    BinMark m = {c->validity.len, c->offsets.len, c->data.len, c->length, c->nulls};
    return m;
}

/* Forget everything appended since ``m`` (validity bits past the length included). */
static void bincol_rewind(BinCol *c, BinMark m) {
    c->validity.len = m.validity;
    c->offsets.len = m.offsets;
    c->data.len = m.data;
    c->length = m.length;
    c->nulls = m.nulls;
    if (m.length & 7) c->validity.p[m.length >> 3] &= (char)((1u << (m.length & 7)) - 1);
}

/* Append one value (NULL = null) of ``n`` bytes. */
static Status bincol_append(BinCol *c, const char *v, Py_ssize_t n) {
    Py_ssize_t i = c->length;
    if ((i & 7) == 0) {
        if (buf_reserve(&c->validity, 1) < 0) return ERR_MEMORY;
        c->validity.p[c->validity.len++] = 0;
    }
    if (v == NULL) {
        c->nulls++;
        n = 0;
    } else {
        c->validity.p[i >> 3] |= (char)(1u << (i & 7));
    }
    if (n > INT32_MAX - c->data.len) return ERR_OVERFLOW;
    if (buf_reserve(&c->data, n) < 0 || buf_reserve(&c->offsets, 4) < 0) return ERR_MEMORY;
    if (n) memcpy(c->data.p + c->data.len, v, (size_t)n);
    c->data.len += n;
    int32_t end = (int32_t)c->data.len;
    memcpy(c->offsets.p + c->offsets.len, &end, 4);
    c->offsets.len += 4;
    c->length++;
    return OK;
}

/* Append one list entry ending at child index ``end``; null when it is empty. */
static Status list_append(BinCol *c, Py_ssize_t end) {
    if (end > INT32_MAX) return ERR_OVERFLOW;
    int32_t start;
    memcpy(&start, c->offsets.p + c->offsets.len - 4, 4);
    Py_ssize_t i = c->length;
    if ((i & 7) == 0) {
        if (buf_reserve(&c->validity, 1) < 0) return ERR_MEMORY;
        c->validity.p[c->validity.len++] = 0;
    }
    if (end == start) c->nulls++;
    else c->validity.p[i >> 3] |= (char)(1u << (i & 7));
    if (buf_reserve(&c->offsets, 4) < 0) return ERR_MEMORY;
    int32_t e = (int32_t)end;
    memcpy(c->offsets.p + c->offsets.len, &e, 4);
    c->offsets.len += 4;
    c->length++;
    return OK;
}

typedef struct {
    PyObject_HEAD
    int headers;
    Py_ssize_t rows;
    Buf offset;     /* int64 per row */
    Buf timestamp;  /* int64 per row, milliseconds */
    Buf ts_type;    /* int32 per row */
    BinCol key;
    BinCol value;
    BinCol header_list; /* validity (null when no headers, as Spark) + int32 list offsets */
    BinCol header_key;
    BinCol header_value;
} ColumnBuilder;

static void builder_clear(ColumnBuilder *self) {
    buf_free(&self->offset);
    buf_free(&self->timestamp);
    buf_free(&self->ts_type);
    bincol_free(&self->key);
    bincol_free(&self->value);
    bincol_free(&self->header_list);
    bincol_free(&self->header_key);
    bincol_free(&self->header_value);
    self->rows = 0;
}

static int builder_reset(ColumnBuilder *self) {
    builder_clear(self);
    if (bincol_init(&self->key) < 0 || bincol_init(&self->value) < 0 ||
        bincol_init(&self->header_list) < 0 || bincol_init(&self->header_key) < 0 ||
        bincol_init(&self->header_value) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void builder_dealloc(ColumnBuilder *self) {
    builder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int builder_init(ColumnBuilder *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"headers", NULL};
    int headers = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &headers)) return -1;
    self->headers = headers;
    return builder_reset(self);
}

/* ---- decoding one records section (no Python calls: runs without the GIL) ---- */

typedef struct {
    const unsigned char *p;
    Py_ssize_t pos;
    Py_ssize_t end;
    const char *error; /* static message on failure */
    Status status;
} Cursor;

static int read_varlong(Cursor *c, int max_bytes, int64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (c->pos >= c->end) {
            c->error = "varint runs past the end of its buffer";
            return -1;
        }
        unsigned char b = c->p[c->pos++];
        if (shift < 64) result |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            return 0;
        }
        shift += 7;
    }
    c->error = max_bytes == 5 ? "varint longer than 5 bytes" : "varint longer than 10 bytes";
    return -1;
}

/* A length-prefixed field inside [pos, limit): *data = NULL for a negative length. */
static int read_field(Cursor *c, Py_ssize_t limit, const char **data, Py_ssize_t *n) {
    int64_t len;
    if (read_varlong(c, 5, &len) < 0) return -1;
    if (len < 0) {
        *data = NULL;
        *n = 0;
        return 0;
    }
    if (len > limit - c->pos) {
        c->error = "field length runs past its record";
        return -1;
    }
    *data = (const char *)c->p + c->pos;
    *n = (Py_ssize_t)len;
    c->pos += (Py_ssize_t)len;
    return 0;
}

#define FAIL(msg) do { c->error = (msg); return -1; } while (0)
#define PUT(buf, value, type) do {                                        \
        type v_ = (value);                                                \
        if (buf_reserve(&(buf), sizeof(type)) < 0) {                      \
            c->status = ERR_MEMORY; return -1; }                          \
        memcpy((buf).p + (buf).len, &v_, sizeof(type));                   \
        (buf).len += sizeof(type); } while (0)
#define APPEND(col, data, n) do {                                         \
        Status s_ = bincol_append(&(col), (data), (n));                   \
        if (s_ != OK) { c->status = s_; return -1; } } while (0)

static int decode(ColumnBuilder *self, Cursor *c, int64_t count, int64_t base_offset,
                  int64_t base_timestamp, int64_t max_timestamp, int32_t ts_type, int64_t lo,
                  int64_t hi) {
    for (int64_t r = 0; r < count; r++) {
        int64_t length, ts_delta, offset_delta, header_count;
        if (read_varlong(c, 5, &length) < 0) return -1;
        if (length < 6 || length > c->end - c->pos) FAIL("record length is invalid");
        Py_ssize_t record_end = c->pos + (Py_ssize_t)length;
        c->pos += 1; /* attributes */
        if (read_varlong(c, 10, &ts_delta) < 0) return -1;
        if (read_varlong(c, 5, &offset_delta) < 0) return -1;
        const char *key, *value;
        Py_ssize_t key_n, value_n;
        if (read_field(c, record_end, &key, &key_n) < 0) return -1;
        if (read_field(c, record_end, &value, &value_n) < 0) return -1;
        if (read_varlong(c, 5, &header_count) < 0) return -1;
        if (header_count < 0 || header_count > record_end - c->pos) FAIL("invalid header count");
        int64_t offset = (int64_t)((uint64_t)base_offset + (uint64_t)offset_delta);
        int keep = offset >= lo && offset < hi;
        for (int64_t h = 0; h < header_count; h++) {
            const char *hkey, *hvalue;
            Py_ssize_t hkey_n, hvalue_n;
            if (read_field(c, record_end, &hkey, &hkey_n) < 0) return -1;
            if (hkey == NULL) FAIL("null header key");
            if (read_field(c, record_end, &hvalue, &hvalue_n) < 0) return -1;
            if (keep && self->headers) {
                APPEND(self->header_key, hkey, hkey_n);
                APPEND(self->header_value, hvalue, hvalue_n);
            }
        }
        if (c->pos != record_end) FAIL("record length does not match its fields");
        if (!keep) continue;
        int64_t timestamp = ts_type == 1  /* LogAppendTime: the batch's max_timestamp */
            ? max_timestamp
            : (int64_t)((uint64_t)base_timestamp + (uint64_t)ts_delta);
        PUT(self->offset, offset, int64_t);
        PUT(self->timestamp, timestamp, int64_t);
        PUT(self->ts_type, ts_type, int32_t);
        APPEND(self->key, key, key_n);
        APPEND(self->value, value, value_n);
        if (self->headers) {
            Status s_ = list_append(&self->header_list, self->header_key.length);
            if (s_ != OK) { c->status = s_; return -1; }
        }
        self->rows++;
    }
    if (c->pos != c->end) FAIL("bytes remain after the last record");
    return 0;
}

static PyObject *builder_add(ColumnBuilder *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"records", "count", "base_offset", "base_timestamp",
                             "max_timestamp", "timestamp_type", "lo", "hi", NULL};
    Py_buffer view;
    long long count, base_offset, base_timestamp, max_timestamp, lo, hi;
    int ts_type;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*LLLLiLL", kwlist, &view, &count,
                                     &base_offset, &base_timestamp, &max_timestamp, &ts_type,
                                     &lo, &hi))
        return NULL;
    if (ts_type != 0 && ts_type != 1) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "timestamp_type must be 0 or 1");
        return NULL;
    }
    Cursor c = {(const unsigned char *)view.buf, 0, view.len, NULL, OK};
    /* A failed add leaves the builder exactly as it was before the call. */
    Py_ssize_t before = self->rows;
    Py_ssize_t marks[3] = {self->offset.len, self->timestamp.len, self->ts_type.len};
    BinMark key = bincol_mark(&self->key), value = bincol_mark(&self->value);
    BinMark hlist = bincol_mark(&self->header_list);
    BinMark hkey = bincol_mark(&self->header_key), hvalue = bincol_mark(&self->header_value);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = decode(self, &c, count, base_offset, base_timestamp, max_timestamp, ts_type, lo, hi);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc < 0) {
        self->rows = before;
        self->offset.len = marks[0];
        self->timestamp.len = marks[1];
        self->ts_type.len = marks[2];
        bincol_rewind(&self->header_list, hlist);
        bincol_rewind(&self->key, key);
        bincol_rewind(&self->value, value);
        bincol_rewind(&self->header_key, hkey);
        bincol_rewind(&self->header_value, hvalue);
        if (c.status == ERR_MEMORY) return PyErr_NoMemory();
        if (c.status == ERR_OVERFLOW) {
            PyErr_SetString(PyExc_OverflowError,
                            "a column would exceed 2 GiB: finish() the builder more often");
            return NULL;
        }
        PyErr_Format(PyExc_ValueError, "%s (at byte %zd of the records)", c.error, c.pos);
        return NULL;
    }
    return PyLong_FromSsize_t(self->rows - before);
}

/* A finished column buffer: owns its memory, exposes it read-only through the buffer
 * protocol. ``finish`` hands each one over wrapped in a memoryview, so pyarrow wraps the
 * builder's memory without the copy (and fresh pages) a ``bytes`` would cost. */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
} Owned;

static void owned_dealloc(Owned *self) {
    PyMem_RawFree(self->p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int owned_getbuffer(Owned *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p ? self->p : (char *)"",
                             self->len, 1, flags);
}

static PyBufferProcs owned_as_buffer = {(getbufferproc)owned_getbuffer, NULL};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "odradek.records._columnar.Owned",
    .tp_basicsize = sizeof(Owned),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory of one finished column buffer.",
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
};

/* The buffer's memory as a memoryview; the builder's Buf is left empty. */
static PyObject *take(Buf *b) {
    Owned *owned = PyObject_New(Owned, &OwnedType);
    if (owned == NULL) return NULL;
    if (b->p != NULL && b->cap > b->len + b->len / 4 + 4096) {  /* give back the slack */
        char *p = (char *)PyMem_RawRealloc(b->p, (size_t)(b->len ? b->len : 1));
        if (p != NULL) b->p = p;
    }
    owned->p = b->p;
    owned->len = b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    PyObject *view = PyMemoryView_FromObject((PyObject *)owned);
    Py_DECREF(owned);
    return view;
}

static PyObject *bincol_tuple(BinCol *c) {
    return Py_BuildValue("(NNNn)", take(&c->validity), take(&c->offsets), take(&c->data),
                         c->nulls);
}

static PyObject *builder_finish(ColumnBuilder *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *headers;
    if (self->headers) {
        headers = Py_BuildValue("(NnNN)", bincol_tuple(&self->header_list),
                                self->header_key.length, bincol_tuple(&self->header_key),
                                bincol_tuple(&self->header_value));
    } else {
        headers = Py_NewRef(Py_None);
    }
    PyObject *out = Py_BuildValue("(nNNNNNN)", self->rows, take(&self->offset),
                                  take(&self->timestamp), take(&self->ts_type),
                                  bincol_tuple(&self->key), bincol_tuple(&self->value), headers);
    if (out == NULL) return NULL;
    if (builder_reset(self) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *builder_rows(ColumnBuilder *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->rows);
}

static PyObject *builder_nbytes(ColumnBuilder *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->key.data.len + self->value.data.len +
                              self->header_key.data.len + self->header_value.data.len +
                              self->rows * 20);
}

static PyMethodDef builder_methods[] = {
    {"add", (PyCFunction)(void (*)(void))builder_add, METH_VARARGS | METH_KEYWORDS,
     "Append the records of one decompressed records section with lo <= offset < hi."},
    {"finish", (PyCFunction)builder_finish, METH_NOARGS,
     "Return the columns' buffers and start afresh."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef builder_getset[] = {
    {"rows", (getter)builder_rows, NULL, "rows appended since the last finish()", NULL},
    {"nbytes", (getter)builder_nbytes, NULL, "approximate bytes buffered", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ColumnBuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "odradek.records._columnar.ColumnBuilder",
    .tp_basicsize = sizeof(ColumnBuilder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Arrow column buffers filled from Kafka records.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)builder_init,
    .tp_dealloc = (destructor)builder_dealloc,
    .tp_methods = builder_methods,
    .tp_getset = builder_getset,
};

/* transactional_batch_in(topic_data): whether a batch of a Produce request's records has
 * the transactional bit (attributes bit 4, magic 2 or more), read from each batch header
 * only: its length (at 8), magic (at 16) and attributes (at 21). A batch cut short (fewer
 * than 23 bytes of header left, a length of 0 or less, or one running past the records)
 * ends the partition's scan: not one (the append answers it CORRUPT_MESSAGE). The Python
 * twin is odradek.server.handlers.produce._has_transactional_batch; the tests hold them to
 * each other. One call per request on every Produce without a transactional id: the loops
 * over topics and partitions run here, not in the interpreter. */
#define TXN_LENGTH_AT 8
#define TXN_MAGIC_AT 16
#define TXN_ATTRIBUTES_AT 21
#define TXN_HEADER_END 23
#define TXN_LOG_OVERHEAD 12
#define TXN_BIT 0x10

static PyObject *partition_data_name = NULL;  /* interned "partition_data" */

/* 1: a transactional batch in the records; 0: none; -1: error set. */
static int records_transactional(PyObject *records) {
    Py_buffer view;
    if (PyObject_GetBuffer(records, &view, PyBUF_SIMPLE) < 0) return -1;
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len, position = 0;
    int found = 0;
    while (position + TXN_HEADER_END <= end) {
        const unsigned char *h = p + position;
        int32_t length = (int32_t)(((uint32_t)h[TXN_LENGTH_AT] << 24)
                                   | ((uint32_t)h[TXN_LENGTH_AT + 1] << 16)
                                   | ((uint32_t)h[TXN_LENGTH_AT + 2] << 8)
                                   | (uint32_t)h[TXN_LENGTH_AT + 3]);
        if (length <= 0 || (int64_t)length > (int64_t)(end - position - TXN_LOG_OVERHEAD))
            break;  /* malformed or truncated: the append refuses it */
        position += TXN_LOG_OVERHEAD + (Py_ssize_t)length;
        if ((int8_t)h[TXN_MAGIC_AT] >= 2 && (h[TXN_ATTRIBUTES_AT + 1] & TXN_BIT)) {
            found = 1;
            break;
        }
    }
    PyBuffer_Release(&view);
    return found;
}

static PyObject *transactional_batch_in(PyObject *module, PyObject *topic_data) {
    (void)module;
    PyObject *topics = PySequence_Fast(topic_data, "topic_data must be a sequence");
    if (topics == NULL) return NULL;
    int found = 0;
    Py_ssize_t n_topics = PySequence_Fast_GET_SIZE(topics);
    for (Py_ssize_t t = 0; t < n_topics && !found; t++) {
        PyObject *data = PyObject_GetAttr(PySequence_Fast_GET_ITEM(topics, t),
                                          partition_data_name);
        if (data == NULL) { found = -1; break; }
        PyObject *partitions = PySequence_Fast(data, "partition_data must be a sequence");
        Py_DECREF(data);
        if (partitions == NULL) { found = -1; break; }
        Py_ssize_t n_partitions = PySequence_Fast_GET_SIZE(partitions);
        for (Py_ssize_t i = 0; i < n_partitions && !found; i++) {
            PyObject *partition = PySequence_Fast_GET_ITEM(partitions, i);
            if (!PyTuple_Check(partition) || PyTuple_GET_SIZE(partition) != 2) {
                PyErr_SetString(PyExc_TypeError,
                                "partition_data holds (index, records) pairs");
                found = -1;
                break;
            }
            PyObject *records = PyTuple_GET_ITEM(partition, 1);
            if (records != Py_None) found = records_transactional(records);
        }
        Py_DECREF(partitions);
    }
    Py_DECREF(topics);
    if (found < 0) return NULL;
    return PyBool_FromLong(found);
}

static PyMethodDef module_methods[] = {
    {"transactional_batch_in", (PyCFunction)transactional_batch_in, METH_O,
     "Whether a batch of a Produce request's topic_data has the transactional bit."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef columnar_module = {
    PyModuleDef_HEAD_INIT, "_columnar", "Kafka records to Arrow buffers (native).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columnar(void) {
    if (PyType_Ready(&ColumnBuilderType) < 0 || PyType_Ready(&OwnedType) < 0) return NULL;
    if (partition_data_name == NULL) {
        partition_data_name = PyUnicode_InternFromString("partition_data");
        if (partition_data_name == NULL) return NULL;
    }
    PyObject *m = PyModule_Create(&columnar_module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "ColumnBuilder", (PyObject *)&ColumnBuilderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
