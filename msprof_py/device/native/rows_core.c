/* Columnar row buffers for the raw profile writer (issue 20: recording's cost per op).
 *
 * A RowBuffer holds the rows of one table as typed columns instead of one Python tuple per
 * row: int64 ('q'), int32 ('i'), float64 ('d') and bool ('b') values in plain arrays, strings
 * ('s') as int32 codes into a per-chunk dictionary (a training loop repeats a few op names,
 * shapes and dtypes). append() copies a row tuple's values in; take() hands every buffered
 * row over as Arrow-ready buffers (values, validity bitmap; strings as their codes and the
 * chunk's dictionary, which Parquet writes as its dictionary page without hashing a value
 * again) and starts the next chunk empty, so the writer builds its Parquet part from buffers
 * rather than converting Python objects, and no row stays a Python object the garbage
 * collector walks.
 *
 * Both are atomic with respect to re-entry: append() converts every value of the row before
 * it writes any (a conversion may run Python code, e.g. a finalizer appending a row of its
 * own), and take() swaps in the fresh buffers before it builds a Python object. None is a
 * null (a validity bitmap is kept once the first null arrives). Plain C against the CPython
 * API, like the engine and allocator cores: no torch, no pyarrow.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "row_api.h"

/* the string objects a column remembers the codes of (a power of two) */
#define RECENT_CODES 16

typedef struct {
    char kind;          /* 'q' int64, 'i' int32, 'd' float64, 'b' bool, 's' string code */
    unsigned char *data; /* values (bool: one bit each, as Arrow stores them) */
    unsigned char *valid; /* validity bitmap, NULL while every value is present */
    PyObject *codes;     /* strings: str -> code (a dict), for this chunk */
    PyObject *values;    /* strings: the chunk's dictionary (a list, in code order) */
    /* strings: the objects coded lately (held), by their address, and their codes: a
       column's rows repeat a few string objects (op names, "", a kind), often alternating,
       so most codes are found without hashing the string */
    PyObject *recent[RECENT_CODES];
    int32_t recent_code[RECENT_CODES];
} Column;

typedef struct {
    PyObject_HEAD
    Py_ssize_t ncols;
    Column *cols;
    Py_ssize_t n;   /* rows buffered */
    Py_ssize_t cap; /* rows the arrays hold */
    Py_ssize_t capacity; /* rows the arrays are first made for (a chunk's: no regrowth) */
} RowBufferObject;

/* one converted value, before it is written */
typedef union {
    long long q;
    double d;
} Value;

static size_t width(char kind) {
    switch (kind) {
        case 'q': return 8;
        case 'd': return 8;
        case 'i': return 4;
        case 's': return 4;
        default: return 0; /* 'b': bits */
    }
}

static size_t bytes_for(char kind, Py_ssize_t rows) {
    size_t w = width(kind);
    return w ? w * (size_t)rows : ((size_t)rows + 7) / 8;
}

static int fresh_dictionary(Column *c) {
    PyObject *codes = PyDict_New();
    PyObject *values = codes == NULL ? NULL : PyList_New(0);
    if (values == NULL) {
        Py_XDECREF(codes);
        return -1;
    }
    c->codes = codes;
    c->values = values;
    return 0;
}

static void free_columns(Column *cols, Py_ssize_t ncols) {
    if (cols == NULL) return;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyMem_Free(cols[i].data);
        PyMem_Free(cols[i].valid);
        Py_XDECREF(cols[i].codes);
        Py_XDECREF(cols[i].values);
        for (int k = 0; k < RECENT_CODES; k++) Py_XDECREF(cols[i].recent[k]);
    }
    PyMem_Free(cols);
}

/* Empty columns of the given kinds (arrays grow on the first append). */
static Column *new_columns(const char *kinds, Py_ssize_t ncols) {
    Column *cols = PyMem_Calloc((size_t)(ncols ? ncols : 1), sizeof(Column));
    if (cols == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < ncols; i++) {
        cols[i].kind = kinds[i];
        if (kinds[i] == 's' && fresh_dictionary(&cols[i]) < 0) {
            free_columns(cols, ncols);
            return NULL;
        }
    }
    return cols;
}

static PyTypeObject RowBufferType;

static PyObject *RowBuffer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"kinds", "capacity", NULL};
    const char *kinds;
    Py_ssize_t ncols, capacity = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s#|n", names, &kinds, &ncols, &capacity))
        return NULL;
    if (capacity < 0) {
        PyErr_SetString(PyExc_ValueError, "RowBuffer: capacity must be >= 0");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < ncols; i++) {
        if (strchr("qidbs", kinds[i]) == NULL || kinds[i] == '\0') {
            PyErr_Format(PyExc_ValueError, "column kind %c: expected one of q i d b s",
                         kinds[i] ? kinds[i] : '0');
            return NULL;
        }
    }
    RowBufferObject *self = (RowBufferObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->ncols = ncols;
    self->capacity = capacity;
    self->cols = new_columns(kinds, ncols);
    if (self->cols == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void RowBuffer_dealloc(RowBufferObject *self) {
    free_columns(self->cols, self->ncols);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Grow every array to hold at least `need` rows (no Python code runs): first to the buffer's
   capacity, so that a chunk fills without being copied as it grows. Value arrays are left
   unset (every row writes its value); bitmaps are zeroed. */
static int reserve(RowBufferObject *self, Py_ssize_t need) {
    if (need <= self->cap) return 0;
    Py_ssize_t cap = self->cap ? self->cap : (self->capacity > 256 ? self->capacity : 256);
    while (cap < need) cap *= 2;
    for (Py_ssize_t i = 0; i < self->ncols; i++) {
        Column *c = &self->cols[i];
        size_t old = bytes_for(c->kind, self->cap), size = bytes_for(c->kind, cap);
        unsigned char *data = PyMem_Realloc(c->data, size);
        if (data == NULL) return -1;
        if (c->kind == 'b') memset(data + old, 0, size - old);
        c->data = data;
        if (c->valid != NULL) {
            size_t vold = bytes_for('b', self->cap), vsize = bytes_for('b', cap);
            unsigned char *valid = PyMem_Realloc(c->valid, vsize);
            if (valid == NULL) return -1;
            memset(valid + vold, 0, vsize - vold);
            c->valid = valid;
        }
    }
    self->cap = cap;
    return 0;
}

/* The code of string `obj` in column `c`'s dictionary, added if new; -1 with an error set. */
static long long string_code(Column *c, PyObject *obj) {
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "expected str, got %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    const size_t slot = ((uintptr_t)obj >> 4) & (RECENT_CODES - 1);
    if (obj == c->recent[slot]) return c->recent_code[slot];
    long long code;
    PyObject *found = PyDict_GetItemWithError(c->codes, obj);
    if (found != NULL) {
        code = PyLong_AsLongLong(found);
    } else {
        if (PyErr_Occurred()) return -1;
        code = PyList_GET_SIZE(c->values);
        if (code >= INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "too many distinct strings in one chunk");
            return -1;
        }
        PyObject *number = PyLong_FromLongLong(code);
        if (number == NULL) return -1;
        int failed =
            PyList_Append(c->values, obj) < 0 || PyDict_SetItem(c->codes, obj, number) < 0;
        Py_DECREF(number);
        if (failed) return -1;
    }
    PyObject *previous = c->recent[slot];
    c->recent[slot] = Py_NewRef(obj); /* held: its address names no other string meanwhile */
    c->recent_code[slot] = (int32_t)code;
    Py_XDECREF(previous);
    return code;
}

/* `obj` converted for column `c` into `out`; 0, or -1 with an error set. */
static int convert(Column *c, PyObject *obj, Value *out) {
    switch (c->kind) {
        case 'q':
        case 'i': {
            if (PyFloat_Check(obj)) {
                PyErr_SetString(PyExc_TypeError, "expected an integer, got float");
                return -1;
            }
            long long v = PyLong_AsLongLong(obj);
            if (v == -1 && PyErr_Occurred()) return -1;
            if (c->kind == 'i' && (v < INT32_MIN || v > INT32_MAX)) {
                PyErr_Format(PyExc_OverflowError, "%lld does not fit an int32 column", v);
                return -1;
            }
            out->q = v;
            return 0;
        }
        case 'd': {
            double v = PyFloat_AsDouble(obj);
            if (v == -1.0 && PyErr_Occurred()) return -1;
            out->d = v;
            return 0;
        }
        case 'b': {
            if (!PyBool_Check(obj)) {
                PyErr_Format(PyExc_TypeError, "expected bool, got %.100s", Py_TYPE(obj)->tp_name);
                return -1;
            }
            out->q = obj == Py_True;
            return 0;
        }
        default: {
            long long code = string_code(c, obj);
            if (code < 0) return -1;
            out->q = code;
            return 0;
        }
    }
}

static void set_bit(unsigned char *bits, Py_ssize_t i, int on) {
    if (on)
        bits[i >> 3] |= (unsigned char)(1u << (i & 7));
    else
        bits[i >> 3] &= (unsigned char)~(1u << (i & 7));
}

/* Write converted value `v` (or a null) at row `row` of column `c`. */
static int store(Column *c, Py_ssize_t row, Py_ssize_t cap, const Value *v, int null) {
    if (null && c->valid == NULL) {
        /* the first null: every earlier row was valid */
        size_t size = bytes_for('b', cap);
        c->valid = PyMem_Malloc(size ? size : 1);
        if (c->valid == NULL) return -1;
        memset(c->valid, 0, size);
        for (Py_ssize_t i = 0; i < row; i++) set_bit(c->valid, i, 1);
    }
    if (c->valid != NULL) set_bit(c->valid, row, !null);
    switch (c->kind) {
        case 'q': ((int64_t *)c->data)[row] = null ? 0 : (int64_t)v->q; break;
        case 'd': ((double *)c->data)[row] = null ? 0.0 : v->d; break;
        case 'b': set_bit(c->data, row, !null && v->q); break;
        default: ((int32_t *)c->data)[row] = null ? 0 : (int32_t)v->q; break;
    }
    return 0;
}

#define STACK_COLUMNS 64

/* Write one row of converted values (`items[i] == Py_None`: a null; `items` NULL: none).
   No Python code runs. 0, or -1 with MemoryError set. */
static int write_row(RowBufferObject *self, const Value *values, PyObject *const *items) {
    if (reserve(self, self->n + 1) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < self->ncols; i++) {
        if (store(&self->cols[i], self->n, self->cap, &values[i],
                  items != NULL && items[i] == Py_None) < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    self->n++;
    return 0;
}

/* Prefix the error set by a conversion with the column it failed in ("column 3: ..."). */
static void name_column(Py_ssize_t i) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *text = value != NULL ? PyObject_Str(value) : NULL;
    if (text != NULL) {
        PyErr_Format(type, "column %zd: %U", i, text);
        Py_DECREF(text);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    } else {
        PyErr_Restore(type, value, tb);
    }
}

static PyObject *RowBuffer_append(RowBufferObject *self, PyObject *row) {
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != self->ncols) {
        PyErr_Format(PyExc_TypeError, "a row is a tuple of %zd values, got %.100s", self->ncols,
                     Py_TYPE(row)->tp_name);
        return NULL;
    }
    Value stack_values[STACK_COLUMNS];
    Value *values = self->ncols <= STACK_COLUMNS
                        ? stack_values
                        : PyMem_Malloc(sizeof(Value) * (size_t)self->ncols);
    if (values == NULL) return PyErr_NoMemory();
    PyObject *result = NULL;
    /* every value converted first (this may run Python code, which may append itself) */
    for (Py_ssize_t i = 0; i < self->ncols; i++) {
        PyObject *item = PyTuple_GET_ITEM(row, i);
        if (item != Py_None && convert(&self->cols[i], item, &values[i]) < 0) {
            name_column(i);
            goto done;
        }
    }
    /* then written, with no Python code in between */
    if (write_row(self, values, PySequence_Fast_ITEMS(row)) < 0) goto done;
    result = Py_NewRef(Py_None);
done:
    if (values != stack_values) PyMem_Free(values);
    return result;
}

/* The memory of one taken column array, handed to Python without a copy: a read-only buffer
   (Arrow wraps it as it is) that frees the array when the last reference goes. */
typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t size;
} ChunkMemoryObject;

static void ChunkMemory_dealloc(ChunkMemoryObject *self) {
    PyMem_Free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ChunkMemory_getbuffer(ChunkMemoryObject *self, Py_buffer *view, int flags) {
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : empty, self->size,
                             1, flags);
}

static PyBufferProcs ChunkMemory_as_buffer = {
    .bf_getbuffer = (getbufferproc)ChunkMemory_getbuffer,
};

static PyTypeObject ChunkMemoryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprof_device_core.ChunkMemory",
    .tp_basicsize = sizeof(ChunkMemoryObject),
    .tp_dealloc = (destructor)ChunkMemory_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_as_buffer = &ChunkMemory_as_buffer,
    .tp_doc = "The memory of one taken column array (a read-only buffer).",
};

/* `*array` (`size` bytes of it) as a ChunkMemory, which takes it over (`*array` becomes
   NULL); a new reference, or NULL with an error set (the array stays where it was). */
static PyObject *chunk_memory(unsigned char **array, Py_ssize_t size) {
    ChunkMemoryObject *memory = PyObject_New(ChunkMemoryObject, &ChunkMemoryType);
    if (memory == NULL) return NULL;
    memory->data = *array;
    memory->size = *array == NULL ? 0 : size;
    *array = NULL;
    return (PyObject *)memory;
}

/* take() -> (rows, [(values, validity or None, dictionary or None) per column]): every
 * buffered row as Arrow buffers (strings: their int32 codes, and the chunk's dictionary, a
 * list of str in code order), the buffer left empty with fresh dictionaries. */
static PyObject *RowBuffer_take(RowBufferObject *self, PyObject *unused) {
    (void)unused;
    /* the next chunk's columns first (allocating may run a finalizer that appends) */
    char *kinds = PyMem_Malloc((size_t)self->ncols + 1);
    if (kinds == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < self->ncols; i++) kinds[i] = self->cols[i].kind;
    Column *fresh = new_columns(kinds, self->ncols);
    PyMem_Free(kinds);
    if (fresh == NULL) return NULL;
    Column *old = self->cols;
    Py_ssize_t rows = self->n;
    self->cols = fresh;
    self->n = 0;
    self->cap = 0;
    PyObject *columns = PyList_New(self->ncols);
    if (columns == NULL) {
        free_columns(old, self->ncols);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < self->ncols; i++) {
        Column *c = &old[i];
        PyObject *data = chunk_memory(&c->data, (Py_ssize_t)bytes_for(c->kind, rows));
        PyObject *dictionary = Py_NewRef(c->kind == 's' ? c->values : Py_None);
        PyObject *valid = c->valid == NULL
                              ? Py_NewRef(Py_None)
                              : chunk_memory(&c->valid, (Py_ssize_t)bytes_for('b', rows));
        PyObject *entry = data && valid ? PyTuple_Pack(3, data, valid, dictionary) : NULL;
        Py_XDECREF(data);
        Py_XDECREF(valid);
        Py_DECREF(dictionary);
        if (entry == NULL) {
            Py_DECREF(columns);
            free_columns(old, self->ncols);
            return NULL;
        }
        PyList_SET_ITEM(columns, i, entry);
    }
    free_columns(old, self->ncols);
    return Py_BuildValue("(nN)", rows, columns);
}

static Py_ssize_t RowBuffer_len(RowBufferObject *self) { return self->n; }

static PyObject *RowBuffer_kinds(RowBufferObject *self, void *closure) {
    (void)closure;
    PyObject *text = PyUnicode_New(self->ncols, 127);
    if (text == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->ncols; i++)
        PyUnicode_WRITE(PyUnicode_1BYTE_KIND, PyUnicode_DATA(text), i, self->cols[i].kind);
    return text;
}

static PyMethodDef RowBuffer_methods[] = {
    {"append", (PyCFunction)RowBuffer_append, METH_O,
     "Buffer one row (a tuple, one value per column; None is a null)."},
    {"take", (PyCFunction)RowBuffer_take, METH_NOARGS,
     "(rows, [(values, validity or None, dictionary or None) per column]); empties the "
     "buffer."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef RowBuffer_getset[] = {
    {"kinds", (getter)RowBuffer_kinds, NULL, "one character per column: q i d b s", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods RowBuffer_as_sequence = {.sq_length = (lenfunc)RowBuffer_len};

static PyTypeObject RowBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprof_device_core.RowBuffer",
    .tp_doc = "The buffered rows of one profile table, as typed columns.",
    .tp_basicsize = sizeof(RowBufferObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = RowBuffer_new,
    .tp_dealloc = (destructor)RowBuffer_dealloc,
    .tp_methods = RowBuffer_methods,
    .tp_getset = RowBuffer_getset,
    .tp_as_sequence = &RowBuffer_as_sequence,
};

/* ---- RowSink: rows the compiled engine core writes itself -------------------------------- *
 *
 * The recorder's per-launch rows (the kernel's `tasks` row and its `launch` host event), written
 * by the engine core's launch_kernel straight into the recorder's buffers instead of as two
 * record objects delivered through the bus to Python, and the `memory` rows of the allocator
 * core's events. The recorder's host-op rows go through it too (op_begin/op_end: it keeps the
 * open op's fields and writes the row at its end, without a Python tuple). The recorder keeps the state those rows
 * read here (step, parent op, next event id, what is recorded now), so both paths give the same
 * rows; it asks the bus to use the sink only while it is the bus's one subscriber.
 */

#define TASK_COLUMNS 31
#define HOST_COLUMNS 16
/* the column kinds of the two tables (msprof_py/profile/schema.py), checked at construction */
#define TASK_KINDS "qissssiqqqqdqsssssssbssiqsqqqqi"
#define HOST_KINDS "qssqqqiqqisssqss"
#define MEMORY_KINDS "qsqqqqqisi"
#define MEMORY_COLUMNS 10
#define TEXT_CACHE_LIMIT 4096
/* a host op's text fields: name, shapes, dtypes, module, module path, stack */
#define OP_TEXTS 6
/* Front caches: direct-mapped slots, indexed by a key object's address, checked before the
   dict caches (a hit costs a pointer compare, no int object and no dict lookup). */
#define FRONT_SLOTS 64
#define FRONT_INDEX(key) ((((uintptr_t)(key)) >> 4) & (FRONT_SLOTS - 1))

/* A front slot: `key` (a strong reference, so its address is not reused while cached) and its
   entry from the dict cache. */
typedef struct {
    PyObject *key, *entry;
} FrontSlot;

/* A kernel cost's row values, read once per cost object (KernelCost is frozen). */
typedef struct {
    PyObject *cost;      /* strong reference, NULL when the slot is empty */
    PyObject *type_text; /* borrowed from the sink's type_texts */
    double flops;
    long long block_dim, bytes, cube_ns, vector_ns, memory_ns;
} CostSlot;

typedef struct {
    PyObject_HEAD
    RowBufferObject *tasks, *host_events, *memory;
    long long step, parent, next_event, tasks_recorded;
    int tasks_on, api_on, memory_on, failed;
    Py_ssize_t chunk_rows, check_every, since_check;
    PyObject *threads;     /* dict: thread ident -> `thread` column value */
    PyObject *on_thread;   /* () -> the calling thread's column value (a miss above) */
    PyObject *render;      /* (tensors) -> the six shape/dtype/format texts */
    PyObject *attr_fields; /* (attrs) -> the seven attribute columns */
    PyObject *on_rows;     /* (table name) -> keep writing (the writer's flush check) */
    PyObject *texts;       /* dict: id(tensors) -> (tensors, six texts) */
    PyObject *attrs;       /* dict: id(attrs) -> (attrs, seven columns) */
    PyObject *type_members, *type_texts; /* task type members and their column texts */
    PyObject *action_members, *action_texts; /* memory actions and their column texts */
    /* the host op open now (op_begin .. op_end, `op_open`): its event id is `parent`, its
       texts (name, shapes, dtypes, module, module path, stack: held until the next op
       replaces them) and its start, thread and sequence */
    PyObject *op_texts[OP_TEXTS];
    long long op_start, op_thread, op_sequence;
    int op_open;
    int ops_on;       /* host-op rows are recorded now */
    PyObject *clock;  /* the recorder's host clock (NULL: not given; the C calls need it) */
    FrontSlot text_front[FRONT_SLOTS], attr_front[FRONT_SLOTS];
    CostSlot costs[FRONT_SLOTS];
    unsigned long last_ident; /* the thread ident of the last `thread` lookup and its value */
    long long last_thread;
    int have_thread;
} RowSinkObject;

static PyTypeObject RowSinkType;

static int has_kinds(const RowBufferObject *b, const char *kinds) {
    if (b->ncols != (Py_ssize_t)strlen(kinds)) return 0;
    for (Py_ssize_t i = 0; i < b->ncols; i++)
        if (b->cols[i].kind != kinds[i]) return 0;
    return 1;
}

static PyObject *s_direct, *s_op, *s_kernel, *s_launch, *s_sync, *s_empty, *s_tasks, *s_host_events,
    *s_memory, *s_task_type_a, *s_block_dim_a, *s_flops, *s_bytes, *s_cube_ns, *s_vector_ns,
    *s_memory_ns;

static int RowSink_traverse(RowSinkObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->tasks);
    Py_VISIT(self->host_events);
    Py_VISIT(self->memory);
    Py_VISIT(self->threads);
    Py_VISIT(self->on_thread);
    Py_VISIT(self->render);
    Py_VISIT(self->attr_fields);
    Py_VISIT(self->on_rows);
    Py_VISIT(self->texts);
    Py_VISIT(self->attrs);
    Py_VISIT(self->type_members);
    Py_VISIT(self->type_texts);
    Py_VISIT(self->action_members);
    Py_VISIT(self->action_texts);
    for (int i = 0; i < OP_TEXTS; i++) Py_VISIT(self->op_texts[i]);
    Py_VISIT(self->clock);
    for (int i = 0; i < FRONT_SLOTS; i++) {
        Py_VISIT(self->text_front[i].key);
        Py_VISIT(self->text_front[i].entry);
        Py_VISIT(self->attr_front[i].key);
        Py_VISIT(self->attr_front[i].entry);
        Py_VISIT(self->costs[i].cost);
    }
    return 0;
}

static int RowSink_clear(RowSinkObject *self) {
    Py_CLEAR(self->tasks);
    Py_CLEAR(self->host_events);
    Py_CLEAR(self->memory);
    Py_CLEAR(self->threads);
    Py_CLEAR(self->on_thread);
    Py_CLEAR(self->render);
    Py_CLEAR(self->attr_fields);
    Py_CLEAR(self->on_rows);
    Py_CLEAR(self->texts);
    Py_CLEAR(self->attrs);
    Py_CLEAR(self->type_members);
    Py_CLEAR(self->type_texts);
    Py_CLEAR(self->action_members);
    Py_CLEAR(self->action_texts);
    for (int i = 0; i < OP_TEXTS; i++) Py_CLEAR(self->op_texts[i]);
    self->op_open = 0;
    Py_CLEAR(self->clock);
    for (int i = 0; i < FRONT_SLOTS; i++) {
        Py_CLEAR(self->text_front[i].key);
        Py_CLEAR(self->text_front[i].entry);
        Py_CLEAR(self->attr_front[i].key);
        Py_CLEAR(self->attr_front[i].entry);
        Py_CLEAR(self->costs[i].cost);
    }
    self->have_thread = 0;
    return 0;
}

static void RowSink_dealloc(RowSinkObject *self) {
    PyObject_GC_UnTrack(self);
    RowSink_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Fill `members` and `texts` (new lists) from dict `texts_by_member`: enum members are found
   by identity, as an enum member's hash runs Python code. */
static int member_texts(PyObject *texts_by_member, PyObject **members, PyObject **texts) {
    *members = PyList_New(0);
    *texts = PyList_New(0);
    if (*members == NULL || *texts == NULL) return -1;
    PyObject *member, *text;
    Py_ssize_t pos = 0;
    while (PyDict_Next(texts_by_member, &pos, &member, &text)) {
        if (!PyUnicode_CheckExact(text)) {
            PyErr_SetString(PyExc_TypeError, "RowSink: the column texts are str");
            return -1;
        }
        if (PyList_Append(*members, member) < 0 || PyList_Append(*texts, text) < 0) return -1;
    }
    return 0;
}

static PyObject *RowSink_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"tasks", "host_events", "memory", "task_types", "memory_actions",
                            "on_thread", "render", "attr_fields", "on_rows", "chunk_rows",
                            "check_every", NULL};
    PyObject *tasks, *host_events, *memory, *task_types, *actions, *on_thread, *render,
        *attr_fields, *on_rows;
    Py_ssize_t chunk_rows, check_every;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!O!O!OOOOnn", names, &RowBufferType,
                                     &tasks, &RowBufferType, &host_events, &RowBufferType,
                                     &memory, &PyDict_Type, &task_types, &PyDict_Type, &actions,
                                     &on_thread, &render, &attr_fields, &on_rows, &chunk_rows,
                                     &check_every))
        return NULL;
    if (!has_kinds((RowBufferObject *)tasks, TASK_KINDS) ||
        !has_kinds((RowBufferObject *)host_events, HOST_KINDS) ||
        !has_kinds((RowBufferObject *)memory, MEMORY_KINDS)) {
        PyErr_SetString(PyExc_ValueError,
                        "RowSink: the buffers' columns are not those of tasks, host_events and "
                        "memory");
        return NULL;
    }
    if (chunk_rows < 1 || check_every < 1) {
        PyErr_SetString(PyExc_ValueError, "RowSink: chunk_rows and check_every must be >= 1");
        return NULL;
    }
    RowSinkObject *self = (RowSinkObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->tasks = (RowBufferObject *)Py_NewRef(tasks);
    self->host_events = (RowBufferObject *)Py_NewRef(host_events);
    self->memory = (RowBufferObject *)Py_NewRef(memory);
    self->on_thread = Py_NewRef(on_thread);
    self->render = Py_NewRef(render);
    self->attr_fields = Py_NewRef(attr_fields);
    self->on_rows = Py_NewRef(on_rows);
    self->chunk_rows = chunk_rows;
    self->check_every = check_every;
    self->parent = -1;
    self->threads = PyDict_New();
    self->texts = PyDict_New();
    self->attrs = PyDict_New();
    if (self->threads == NULL || self->texts == NULL || self->attrs == NULL ||
        member_texts(task_types, &self->type_members, &self->type_texts) < 0 ||
        member_texts(actions, &self->action_members, &self->action_texts) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* The column text of enum member `member` (borrowed), or NULL with an error set. */
static PyObject *text_of(PyObject *members, PyObject *texts, PyObject *member) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(members); i++)
        if (PyList_GET_ITEM(members, i) == member) return PyList_GET_ITEM(texts, i);
    PyErr_Format(PyExc_ValueError, "RowSink: no column text for %R", member);
    return NULL;
}

/* The cached entry for `key` (a tuple (key, values...)) in `cache`, computed by `fn` on a miss;
   a new reference, or NULL with an error set. Keyed by identity, holding the key alive. */
static PyObject *cached_by_identity_slow(PyObject *cache, PyObject *key, PyObject *fn,
                                         Py_ssize_t n) {
    PyObject *id = PyLong_FromVoidPtr(key);
    if (id == NULL) return NULL;
    PyObject *entry = PyDict_GetItemWithError(cache, id);
    if (entry != NULL && PyTuple_GET_ITEM(entry, 0) == key) {
        Py_DECREF(id);
        return Py_NewRef(entry);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(id);
        return NULL;
    }
    PyObject *values = PyObject_CallOneArg(fn, key);
    PyObject *fast = values ? PySequence_Tuple(values) : NULL;
    Py_XDECREF(values);
    if (fast == NULL || PyTuple_GET_SIZE(fast) != n) {
        if (fast != NULL) PyErr_Format(PyExc_ValueError, "expected %zd values", n);
        Py_XDECREF(fast);
        Py_DECREF(id);
        return NULL;
    }
    entry = PyTuple_New(n + 1);
    if (entry != NULL) {
        PyTuple_SET_ITEM(entry, 0, Py_NewRef(key));
        for (Py_ssize_t i = 0; i < n; i++)
            PyTuple_SET_ITEM(entry, i + 1, Py_NewRef(PyTuple_GET_ITEM(fast, i)));
        if (PyDict_GET_SIZE(cache) >= TEXT_CACHE_LIMIT) PyDict_Clear(cache);
        if (PyDict_SetItem(cache, id, entry) < 0) Py_CLEAR(entry);
    }
    Py_DECREF(fast);
    Py_DECREF(id);
    return entry;
}

/* cached_by_identity_slow behind the front slots `front`. */
static PyObject *cached_by_identity(FrontSlot *front, PyObject *cache, PyObject *key,
                                    PyObject *fn, Py_ssize_t n) {
    FrontSlot *slot = &front[FRONT_INDEX(key)];
    if (slot->key == key) return Py_NewRef(slot->entry);
    PyObject *entry = cached_by_identity_slow(cache, key, fn, n);
    if (entry == NULL) return NULL;
    Py_XSETREF(slot->key, Py_NewRef(key));
    Py_XSETREF(slot->entry, Py_NewRef(entry));
    return entry;
}

static int get_ll(PyObject *obj, PyObject *name, long long *out);
static int get_rounded(PyObject *obj, PyObject *name, long long *out);

/* The row values of kernel cost `cost` (a slot of the sink's cost cache), or NULL with an error
   set. */
static const CostSlot *cost_values(RowSinkObject *self, PyObject *cost) {
    CostSlot *slot = &self->costs[FRONT_INDEX(cost)];
    if (slot->cost == cost) return slot;
    CostSlot fresh = {0};
    PyObject *task_type = PyObject_GetAttr(cost, s_task_type_a);
    if (task_type == NULL) return NULL;
    fresh.type_text = text_of(self->type_members, self->type_texts, task_type);
    Py_DECREF(task_type);
    if (fresh.type_text == NULL) return NULL;
    PyObject *flops = PyObject_GetAttr(cost, s_flops);
    if (flops == NULL) return NULL;
    fresh.flops = PyFloat_AsDouble(flops);
    Py_DECREF(flops);
    if (PyErr_Occurred()) return NULL;
    if (get_ll(cost, s_block_dim_a, &fresh.block_dim) < 0 ||
        get_ll(cost, s_bytes, &fresh.bytes) < 0 ||
        get_rounded(cost, s_cube_ns, &fresh.cube_ns) < 0 ||
        get_rounded(cost, s_vector_ns, &fresh.vector_ns) < 0 ||
        get_rounded(cost, s_memory_ns, &fresh.memory_ns) < 0)
        return NULL;
    fresh.cost = Py_NewRef(cost);
    PyObject *old = slot->cost;
    *slot = fresh;
    Py_XDECREF(old);
    return slot;
}

/* The ident of the thread running an npu backward now (0: none; msprof_py.adapter.
   backward_thread keeps it): its rows go under ident + 1, autograd's device thread. */
static unsigned long backward_ident = 0;

PyObject *set_backward_thread(PyObject *m, PyObject *arg) {
    (void)m;
    const unsigned long ident = PyLong_AsUnsignedLong(arg);
    if (ident == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    backward_ident = ident;
    Py_RETURN_NONE;
}

static int sink_thread(RowSinkObject *self, long long *out) {
    unsigned long raw = PyThread_get_thread_ident();
    if (raw == backward_ident) raw += 1;
    if (self->have_thread && self->last_ident == raw) {
        *out = self->last_thread;
        return 0;
    }
    PyObject *ident = PyLong_FromUnsignedLong(raw);
    if (ident == NULL) return -1;
    PyObject *found = PyDict_GetItemWithError(self->threads, ident);
    if (found == NULL) {
        if (PyErr_Occurred() || (found = PyObject_CallNoArgs(self->on_thread)) == NULL ||
            PyDict_SetItem(self->threads, ident, found) < 0) {
            Py_XDECREF(found);
            Py_DECREF(ident);
            return -1;
        }
        Py_DECREF(found); /* the dict holds it */
    }
    Py_DECREF(ident);
    *out = PyLong_AsLongLong(found);
    if (*out == -1 && PyErr_Occurred()) return -1;
    self->last_ident = raw;
    self->last_thread = *out;
    self->have_thread = 1;
    return 0;
}

static int get_ll(PyObject *obj, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* Python's round() of float attribute `name` (ties to even, as rint in the default mode). */
static int get_rounded(PyObject *obj, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    if (PyLong_Check(v)) {
        *out = PyLong_AsLongLong(v);
    } else {
        double d = PyFloat_AsDouble(v);
        *out = (long long)__builtin_rint(d);
    }
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

/* Set string column `i` of `values` in buffer `b` to the code of `text`. */
static int put_text(RowBufferObject *b, Value *values, Py_ssize_t i, PyObject *text) {
    long long code = string_code(&b->cols[i], text);
    if (code < 0) return -1;
    values[i].q = code;
    return 0;
}

/* After a row went into `b` (table `name`): let the writer flush when the chunk is full or
   every `check_every` rows; it answers whether to keep writing (False: recording failed). */
static int sink_after_row(RowSinkObject *self, RowBufferObject *b, PyObject *name) {
    if (++self->since_check < self->check_every && b->n < self->chunk_rows) return 0;
    self->since_check = 0;
    PyObject *keep = PyObject_CallOneArg(self->on_rows, name);
    if (keep == NULL) return -1;
    if (!PyObject_IsTrue(keep)) self->failed = 1;
    Py_DECREF(keep);
    return 0;
}

/* The host_events row of a launch or a blocking wait (kind `kind`; see Recorder._host for
   the record path's), when launch rows are recorded now. */
static int sink_host(RowSinkObject *self, PyObject *kind, PyObject *name, long long start,
                     long long end, long long stream_id, long long task_id) {
    if (!self->api_on) return 0;
    long long thread;
    if (sink_thread(self, &thread) < 0) return -1;
    RowBufferObject *b = self->host_events;
    Value v[HOST_COLUMNS];
    v[0].q = self->next_event++;
    v[3].q = start;
    v[4].q = end;
    v[5].q = thread;
    v[6].q = stream_id;
    v[7].q = task_id;
    v[8].q = self->parent;
    v[9].q = self->step;
    v[13].q = -1;
    if (put_text(b, v, 1, kind) < 0 || put_text(b, v, 2, name) < 0) return -1;
    static const Py_ssize_t empty[] = {10, 11, 12, 14, 15};
    for (size_t k = 0; k < sizeof(empty) / sizeof(empty[0]); k++)
        if (put_text(b, v, empty[k], s_empty) < 0) return -1;
    if (write_row(b, v, NULL) < 0) return -1;
    return sink_after_row(self, b, s_host_events);
}

/* The row of the host blocking from `start` to `end` (see Engine._on_block for the record
   path's: a SYNC host record). */
int sink_sync(PyObject *sink, PyObject *name, long long start, long long end,
              long long stream_id) {
    RowSinkObject *self = (RowSinkObject *)sink;
    if (self->failed) return 0;
    return sink_host(self, s_sync, name, start, end, stream_id, -1);
}

/* The rows of one kernel launch (see Engine._emit_kernel for the record path's). */
int sink_kernel(PyObject *sink, long long host_start, long long host_end, long long stream_id,
                long long task_id, long long launch, long long start, long long end,
                long long wait, PyObject *cost, PyObject *name, PyObject *op_type,
                PyObject *tensors, PyObject *attrs) {
    RowSinkObject *self = (RowSinkObject *)sink;
    if (self->failed) return 0;
    if (sink_host(self, s_launch, name, host_start, host_end, stream_id, task_id) < 0) return -1;
    if (!self->tasks_on || self->failed) return 0;
    RowBufferObject *b = self->tasks;
    Value v[TASK_COLUMNS];
    const CostSlot *c = cost_values(self, cost);
    if (c == NULL) return -1;
    PyObject *type_text = c->type_text;
    v[11].d = c->flops;
    v[6].q = c->block_dim;
    v[12].q = c->bytes;
    v[26].q = c->cube_ns;
    v[27].q = c->vector_ns;
    v[28].q = c->memory_ns;
    v[0].q = task_id;
    v[1].q = stream_id;
    v[7].q = launch;
    v[8].q = start;
    v[9].q = end;
    v[10].q = wait;
    v[29].q = self->parent;
    v[30].q = self->step;
    if (put_text(b, v, 2, s_kernel) < 0 || put_text(b, v, 3, type_text) < 0 ||
        put_text(b, v, 4, name) < 0 || put_text(b, v, 5, op_type) < 0)
        return -1;
    PyObject *texts = cached_by_identity(self->text_front, self->texts, tensors, self->render, 6);
    if (texts == NULL) return -1;
    int failed = 0;
    for (Py_ssize_t i = 0; i < 6 && !failed; i++)
        failed = put_text(b, v, 13 + i, PyTuple_GET_ITEM(texts, i + 1)) < 0;
    Py_DECREF(texts);
    if (failed) return -1;
    /* attributes: copy kind, pinned, collective, algorithm, world size, notify wait, op state */
    PyObject *fields = cached_by_identity(self->attr_front, self->attrs, attrs, self->attr_fields, 7);
    if (fields == NULL) return -1;
    for (Py_ssize_t i = 0; i < 7 && !failed; i++)
        failed = convert(&b->cols[19 + i], PyTuple_GET_ITEM(fields, i + 1), &v[19 + i]) < 0;
    Py_DECREF(fields);
    if (failed) return -1;
    if (write_row(b, v, NULL) < 0) return -1;
    self->tasks_recorded++;
    return sink_after_row(self, b, s_tasks);
}

/* The row of one caching-allocator event (see Recorder._memory for the record path's). */
int sink_memory(PyObject *sink, long long time_ns, PyObject *action, long long address,
                long long size, long long allocated, long long reserved, long long stream_id,
                PyObject *tag) {
    RowSinkObject *self = (RowSinkObject *)sink;
    if (self->failed || !self->memory_on) return 0;
    PyObject *text = text_of(self->action_members, self->action_texts, action);
    if (text == NULL) return -1;
    RowBufferObject *b = self->memory;
    Value v[MEMORY_COLUMNS];
    v[0].q = time_ns;
    v[2].q = address;
    v[3].q = size;
    v[4].q = allocated;
    v[5].q = reserved;
    v[6].q = allocated; /* active: every live block is active here */
    v[7].q = stream_id;
    v[9].q = self->step;
    if (put_text(b, v, 1, text) < 0 || put_text(b, v, 8, tag) < 0 || write_row(b, v, NULL) < 0)
        return -1;
    return sink_after_row(self, b, s_memory);
}

#define OP_FIELDS 9

/* the host_events columns of a host op's texts (name, shapes, dtypes, module, module path,
   stack) */
static const Py_ssize_t op_text_column[OP_TEXTS] = {2, 10, 11, 12, 14, 15};

/* A host op opens with these fields: it takes the next event id and is the parent of what it
   launches until its end. */
static void op_open(RowSinkObject *self, PyObject *const texts[OP_TEXTS], long long start,
                    long long thread, long long sequence) {
    for (int i = 0; i < OP_TEXTS; i++) Py_XSETREF(self->op_texts[i], Py_NewRef(texts[i]));
    self->op_start = start;
    self->op_thread = thread;
    self->op_sequence = sequence;
    self->op_open = 1;
    self->parent = self->next_event++;
}

/* No host op is open. */
static void op_close(RowSinkObject *self) {
    self->op_open = 0;
    self->parent = -1;
}

/* The open host op returned at host time `end`: its host_events row (none when no op is
   open). */
static int op_end(RowSinkObject *self, long long end) {
    if (!self->op_open) return 0;
    const long long event_id = self->parent;
    op_close(self);
    if (self->failed) return 0;
    RowBufferObject *b = self->host_events;
    Value v[HOST_COLUMNS];
    v[0].q = event_id;
    v[3].q = self->op_start;
    v[4].q = end;
    v[5].q = self->op_thread;
    v[6].q = -1;
    v[7].q = -1;
    v[8].q = -1;
    v[9].q = self->step;
    v[13].q = self->op_sequence;
    if (put_text(b, v, 1, s_op) < 0) return -1;
    for (Py_ssize_t i = 0; i < OP_TEXTS; i++) {
        const Py_ssize_t c = op_text_column[i];
        if (convert(&b->cols[c], self->op_texts[i], &v[c]) < 0) return -1;
    }
    if (write_row(b, v, NULL) < 0) return -1;
    return sink_after_row(self, b, s_host_events);
}

/* op_begin(name, start, thread, shapes, dtypes, module, sequence, module_path, stack): a host
   op opens (Recorder.op_begin computed the fields); it takes the next event id and is the
   parent of what it launches until op_end. */
static PyObject *RowSink_op_begin(RowSinkObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != OP_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "op_begin(name, start, thread, shapes, dtypes, module, "
                                         "sequence, module_path, stack)");
        return NULL;
    }
    const long long start = PyLong_AsLongLong(args[1]);
    const long long thread = PyLong_AsLongLong(args[2]);
    const long long sequence = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred()) return NULL;
    PyObject *const texts[OP_TEXTS] = {args[0], args[3], args[4], args[5], args[7], args[8]};
    op_open(self, texts, start, thread, sequence);
    Py_RETURN_NONE;
}

/* op_close(): no host op is open (the step is not recorded). */
static PyObject *RowSink_op_close(RowSinkObject *self, PyObject *unused) {
    (void)unused;
    op_close(self);
    Py_RETURN_NONE;
}

/* op_end(end): the open host op returned at host time `end`: its host_events row. */
static PyObject *RowSink_op_end(RowSinkObject *self, PyObject *end_obj) {
    const long long end = PyLong_AsLongLong(end_obj);
    if ((end == -1 && PyErr_Occurred()) || op_end(self, end) < 0) return NULL;
    Py_RETURN_NONE;
}

/* ---- the C calls of row_api.h (the adapter's compiled per-op path) --------------------- */

int read_host_clock(PyObject *clock, long long *out); /* engine_core.c */

static int api_usable(PyObject *obj) {
    return Py_IS_TYPE(obj, &RowSinkType) && ((RowSinkObject *)obj)->clock != NULL;
}

static int api_ops_on(PyObject *sink) { return ((RowSinkObject *)sink)->ops_on; }

/* The time the sink's host clock gives now (0), or -1 with an error set. */
static int sink_now(RowSinkObject *self, long long *out) {
    if (self->clock == NULL) {
        PyErr_SetString(PyExc_AttributeError, "RowSink: no host clock (its clock was deleted)");
        return -1;
    }
    return read_host_clock(self->clock, out);
}

static int api_op_begin(PyObject *sink, PyObject *name, PyObject *shapes, PyObject *dtypes,
                        PyObject *module, long long sequence, PyObject *module_path) {
    RowSinkObject *self = (RowSinkObject *)sink;
    long long start, thread;
    if (sink_now(self, &start) < 0 || sink_thread(self, &thread) < 0) return -1;
    PyObject *const texts[OP_TEXTS] = {name, shapes, dtypes, module, module_path, s_empty};
    op_open(self, texts, start, thread, sequence);
    return 0;
}

static int api_op_end(PyObject *sink) {
    RowSinkObject *self = (RowSinkObject *)sink;
    if (!self->op_open) return 0;
    long long end;
    if (sink_now(self, &end) < 0) return -1;
    return op_end(self, end);
}

static void api_op_close(PyObject *sink) { op_close((RowSinkObject *)sink); }

static const MsprofRowApi row_api = {
    MSPROF_ROW_API_VERSION, api_usable, api_ops_on, api_op_begin, api_op_end, api_op_close,
};

static PyMethodDef RowSink_methods[] = {
    {"op_begin", (PyCFunction)(void (*)(void))RowSink_op_begin, METH_FASTCALL,
     "A host op opens: (name, start, thread, shapes, dtypes, module, sequence, module_path, "
     "stack)."},
    {"op_end", (PyCFunction)RowSink_op_end, METH_O, "The open host op returned at `end`."},
    {"op_close", (PyCFunction)RowSink_op_close, METH_NOARGS, "No host op is open."},
    {NULL, NULL, 0, NULL},
};

/* The RowSink record bus `bus` offers as `direct` (a new reference); NULL when it offers none
   (no error set: a bus without the attribute counts as none) or on an error (set). */
PyObject *bus_sink(PyObject *bus) {
    PyObject *direct = PyObject_GetAttr(bus, s_direct);
    if (direct == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear();
        return NULL;
    }
    if (!Py_IS_TYPE(direct, &RowSinkType)) Py_CLEAR(direct);
    return direct;
}

static PyMemberDef RowSink_members[] = {
    {"step", T_LONGLONG, offsetof(RowSinkObject, step), 0, "the `step` column of new rows"},
    {"parent", T_LONGLONG, offsetof(RowSinkObject, parent), 0,
     "event id of the host op running now (-1: none)"},
    {"next_event", T_LONGLONG, offsetof(RowSinkObject, next_event), 0,
     "the next host event id (shared with the recorder's own rows)"},
    {"tasks_recorded", T_LONGLONG, offsetof(RowSinkObject, tasks_recorded), 0,
     "task rows written"},
    {"tasks_on", T_BOOL, offsetof(RowSinkObject, tasks_on), 0, "task rows are recorded now"},
    {"api_on", T_BOOL, offsetof(RowSinkObject, api_on), 0, "launch rows are recorded now"},
    {"memory_on", T_BOOL, offsetof(RowSinkObject, memory_on), 0,
     "allocator rows are recorded now"},
    {"failed", T_BOOL, offsetof(RowSinkObject, failed), 0,
     "the writer stopped recording: nothing more is written"},
    {"ops_on", T_BOOL, offsetof(RowSinkObject, ops_on), 0, "host-op rows are recorded now"},
    {"clock", T_OBJECT_EX, offsetof(RowSinkObject, clock), 0,
     "the recorder's host clock (the compiled per-op path's host ops read it)"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RowSinkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprof_device_core.RowSink",
    .tp_doc = "The recorder's task and launch rows, written by the compiled engine core.",
    .tp_basicsize = sizeof(RowSinkObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = RowSink_new,
    .tp_dealloc = (destructor)RowSink_dealloc,
    .tp_traverse = (traverseproc)RowSink_traverse,
    .tp_clear = (inquiry)RowSink_clear,
    .tp_members = RowSink_members,
    .tp_methods = RowSink_methods,
};

int add_row_types(PyObject *m) {
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&s_direct, "direct"},         {&s_op, "op"},
        {&s_kernel, "kernel"},         {&s_launch, "launch"},
        {&s_sync, "sync"},
        {&s_empty, ""},                {&s_tasks, "tasks"},
        {&s_host_events, "host_events"}, {&s_memory, "memory"},
        {&s_task_type_a, "task_type"}, {&s_block_dim_a, "block_dim"},
        {&s_flops, "flops"},           {&s_bytes, "bytes"},
        {&s_cube_ns, "cube_ns"},       {&s_vector_ns, "vector_ns"},
        {&s_memory_ns, "memory_ns"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return -1;
    if (PyType_Ready(&RowBufferType) < 0 || PyType_Ready(&RowSinkType) < 0 ||
        PyType_Ready(&ChunkMemoryType) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "RowBuffer", (PyObject *)&RowBufferType) < 0) return -1;
    PyObject *api = PyCapsule_New((void *)&row_api, MSPROF_ROW_API_NAME, NULL);
    if (api == NULL) return -1;
    const int added = PyModule_AddObjectRef(m, "row_api", api);
    Py_DECREF(api);
    if (added < 0) return -1;
    return PyModule_AddObjectRef(m, "RowSink", (PyObject *)&RowSinkType);
}
