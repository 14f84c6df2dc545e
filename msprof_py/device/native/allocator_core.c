/*
 * The compiled core of the caching allocator (msprof_py/device/caching.py), built into the
 * msprof_device_core module beside the engine core (engine_core.c calls add_allocator_types).
 *
 * The same blocks, segments, free pools and statistics as the Python allocator, with the same
 * arithmetic: best fit per (small pool?, stream) by (size, address), split when the rest is big
 * enough, merge with free neighbours on free, segments from the driver in creation order. What
 * needs Python stays there and is called back: a new segment's address from the driver
 * (_segment_address: retry after emptying the cache, the out-of-memory error), giving a segment
 * back (_release_segment), and the memory records while the bus has subscribers (_emit).
 *
 * hold(size, stream_id, tag) returns a Handle: the device memory of one npu storage, freed in C
 * when the handle dies (no Python frame per freed storage).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct Segment Segment;

typedef struct Block {
    long long address, size, requested, stream_id;
    PyObject *tag; /* owned */
    char allocated;
    Segment *segment;
    struct Block *prev, *next;
} Block;

struct Segment {
    long long address, size, stream_id, allocated_bytes;
    int small;
    Block *head;
};

typedef struct {
    long long size, address;
    Block *block;
} FreeEntry;

typedef struct {
    int small;
    long long stream_id;
    FreeEntry *entries;
    Py_ssize_t n, cap;
} FreePool;

/* address -> live block: open addressing, linear probing, backward-shift deletion */
typedef struct {
    long long *keys;
    Block **values; /* NULL: empty slot */
    Py_ssize_t cap, n;
} LiveMap;

typedef struct {
    PyObject_HEAD
    /* configuration (_core_setup) */
    long long round, small_max, small_segment, large_segment, large_threshold, huge_page;
    PyObject *actions; /* (MALLOC, FREE, SEGMENT_ALLOC, SEGMENT_FREE) */
    PyObject *error;   /* DeviceError */
    PyObject *empty;   /* "" */
    /* a KeyboardInterrupt or SystemExit raised while a dying handle freed its block (in a
       record callback): raised again by the next call into the allocator */
    PyObject *deferred;
    /* state */
    FreePool *pools;
    Py_ssize_t n_pools;
    Segment **segments; /* in creation order */
    Py_ssize_t n_segments, cap_segments;
    LiveMap live;
    /* statistics (the Python allocator's attribute names) */
    long long allocated, requested, reserved, inactive_split;
    long long peak_allocated, peak_reserved, peak_requested;
    long long num_allocs, num_frees, num_device_alloc, num_device_free;
    long long num_alloc_retries, num_ooms;
} AllocatorObject;

static PyTypeObject AllocatorType;
static PyObject *s_bus_attr, *s_active_attr, *s_clock_attr;

/* rows_core.c: the recorder's direct row sink */
PyObject *bus_sink(PyObject *bus);
int sink_memory(PyObject *sink, long long time_ns, PyObject *action, long long address,
                long long size, long long allocated, long long reserved, long long stream_id,
                PyObject *tag);

enum { A_MALLOC, A_FREE, A_SEGMENT_ALLOC, A_SEGMENT_FREE };

/* ---- the live map ---------------------------------------------------------------------------- */

static inline Py_ssize_t live_slot(const LiveMap *m, long long key) {
    unsigned long long h = (unsigned long long)key * 0x9E3779B97F4A7C15ULL;
    return (Py_ssize_t)(h >> 20) & (m->cap - 1);
}

static Block *live_get(const LiveMap *m, long long key) {
    if (m->cap == 0) return NULL;
    for (Py_ssize_t i = live_slot(m, key);; i = (i + 1) & (m->cap - 1)) {
        if (m->values[i] == NULL) return NULL;
        if (m->keys[i] == key) return m->values[i];
    }
}

static int live_put(LiveMap *m, long long key, Block *value);

static int live_grow(LiveMap *m) {
    LiveMap bigger = {NULL, NULL, m->cap ? m->cap * 2 : 64, 0};
    bigger.keys = PyMem_Calloc((size_t)bigger.cap, sizeof(long long));
    bigger.values = PyMem_Calloc((size_t)bigger.cap, sizeof(Block *));
    if (bigger.keys == NULL || bigger.values == NULL) {
        PyMem_Free(bigger.keys);
        PyMem_Free(bigger.values);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < m->cap; i++)
        if (m->values[i] != NULL) live_put(&bigger, m->keys[i], m->values[i]);
    PyMem_Free(m->keys);
    PyMem_Free(m->values);
    *m = bigger;
    return 0;
}

static int live_put(LiveMap *m, long long key, Block *value) {
    if ((m->n + 1) * 2 > m->cap && live_grow(m) < 0) return -1;
    Py_ssize_t i = live_slot(m, key);
    while (m->values[i] != NULL && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (m->values[i] == NULL) m->n++;
    m->keys[i] = key;
    m->values[i] = value;
    return 0;
}

static Block *live_pop(LiveMap *m, long long key) {
    if (m->cap == 0) return NULL;
    Py_ssize_t i = live_slot(m, key);
    while (m->values[i] != NULL && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    Block *found = m->values[i];
    if (found == NULL) return NULL;
    m->values[i] = NULL;
    m->n--;
    /* backward shift: move later entries of the probe run into the hole when allowed */
    Py_ssize_t hole = i;
    for (Py_ssize_t j = (i + 1) & (m->cap - 1); m->values[j] != NULL; j = (j + 1) & (m->cap - 1)) {
        const Py_ssize_t home = live_slot(m, m->keys[j]);
        const int movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            m->keys[hole] = m->keys[j];
            m->values[hole] = m->values[j];
            m->values[j] = NULL;
            hole = j;
        }
    }
    return found;
}

/* ---- free pools ------------------------------------------------------------------------------- */

static FreePool *pool_of(AllocatorObject *self, int small, long long stream_id, int create) {
    for (Py_ssize_t i = 0; i < self->n_pools; i++)
        if (self->pools[i].small == small && self->pools[i].stream_id == stream_id)
            return &self->pools[i];
    if (!create) return NULL;
    FreePool *pools = PyMem_Realloc(self->pools, sizeof(FreePool) * (size_t)(self->n_pools + 1));
    if (pools == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    self->pools = pools;
    FreePool *p = &pools[self->n_pools++];
    p->small = small;
    p->stream_id = stream_id;
    p->entries = NULL;
    p->n = p->cap = 0;
    return p;
}

static inline int entry_less(long long size, long long address, const FreeEntry *e) {
    return size < e->size || (size == e->size && address < e->address);
}

/* first index whose entry is not less than (size, address) */
static Py_ssize_t pool_lower_bound(const FreePool *p, long long size, long long address) {
    Py_ssize_t lo = 0, hi = p->n;
    while (lo < hi) {
        const Py_ssize_t mid = (lo + hi) / 2;
        const FreeEntry *e = &p->entries[mid];
        if (e->size < size || (e->size == size && e->address < address))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int cache_block(AllocatorObject *self, Block *b) {
    FreePool *p = pool_of(self, b->segment->small, b->segment->stream_id, 1);
    if (p == NULL) return -1;
    if (p->n == p->cap) {
        const Py_ssize_t cap = p->cap ? p->cap * 2 : 16;
        FreeEntry *entries = PyMem_Realloc(p->entries, sizeof(FreeEntry) * (size_t)cap);
        if (entries == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        p->entries = entries;
        p->cap = cap;
    }
    /* bisect.insort: after equal entries (none: addresses are distinct) */
    Py_ssize_t lo = 0, hi = p->n;
    while (lo < hi) {
        const Py_ssize_t mid = (lo + hi) / 2;
        if (entry_less(b->size, b->address, &p->entries[mid]))
            hi = mid;
        else
            lo = mid + 1;
    }
    memmove(p->entries + lo + 1, p->entries + lo, sizeof(FreeEntry) * (size_t)(p->n - lo));
    p->entries[lo].size = b->size;
    p->entries[lo].address = b->address;
    p->entries[lo].block = b;
    p->n++;
    return 0;
}

static void uncache_block(AllocatorObject *self, Block *b) {
    FreePool *p = pool_of(self, b->segment->small, b->segment->stream_id, 0);
    if (p == NULL) return;
    const Py_ssize_t i = pool_lower_bound(p, b->size, b->address);
    if (i < p->n && p->entries[i].block == b) {
        memmove(p->entries + i, p->entries + i + 1, sizeof(FreeEntry) * (size_t)(p->n - i - 1));
        p->n--;
    }
}

/* ---- blocks ------------------------------------------------------------------------------------ */

static Block *block_new(AllocatorObject *self, long long address, long long size,
                        long long stream_id, Segment *segment, Block *prev) {
    Block *b = PyMem_Malloc(sizeof(Block));
    if (b == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    b->address = address;
    b->size = size;
    b->requested = 0;
    b->stream_id = stream_id;
    Py_INCREF(self->empty);
    b->tag = self->empty;
    b->allocated = 0;
    b->segment = segment;
    b->prev = prev;
    b->next = NULL;
    return b;
}

static void block_free(Block *b) {
    Py_XDECREF(b->tag);
    PyMem_Free(b);
}

static inline void set_tag(Block *b, PyObject *tag) {
    Py_INCREF(tag);
    Py_SETREF(b->tag, tag);
}

/* the record of an event while the bus has subscribers: _emit(bus, action, address, size,
   stream_id, tag); or, when the one subscriber offers a RowSink (the bus's `direct`), its row
   written there (rows_core.c), timed by the allocator's clock */
static int emit(AllocatorObject *self, int action, long long address, long long size,
                long long stream_id, PyObject *tag) {
    PyObject *bus = PyObject_GetAttr((PyObject *)self, s_bus_attr);
    if (bus == NULL) return -1;
    if (bus == Py_None) {
        Py_DECREF(bus);
        return 0;
    }
    PyObject *action_obj = PyTuple_GET_ITEM(self->actions, action);
    PyObject *direct = bus_sink(bus);
    if (direct != NULL) {
        PyObject *clock = PyObject_GetAttr((PyObject *)self, s_clock_attr);
        PyObject *now = clock != NULL ? PyObject_CallNoArgs(clock) : NULL;
        long long time_ns = now != NULL ? PyLong_AsLongLong(now) : -1;
        int rc = -1;
        if (now != NULL && !(time_ns == -1 && PyErr_Occurred()))
            rc = sink_memory(direct, time_ns, action_obj, address, size, self->allocated,
                             self->reserved, stream_id, tag);
        Py_XDECREF(now);
        Py_XDECREF(clock);
        Py_DECREF(direct);
        Py_DECREF(bus);
        return rc;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(bus);
        return -1;
    }
    PyObject *flag = PyObject_GetAttr(bus, s_active_attr);
    int active = flag == NULL ? -1 : PyObject_IsTrue(flag);
    Py_XDECREF(flag);
    if (active > 0) {
        PyObject *res = PyObject_CallMethod((PyObject *)self, "_emit", "OOLLLO", bus, action_obj,
                                           address, size, stream_id, tag);
        active = res == NULL ? -1 : 0;
        Py_XDECREF(res);
    }
    Py_DECREF(bus);
    return active < 0 ? -1 : 0;
}

static inline long long round_up(long long n, long long unit) { return (n + unit - 1) / unit * unit; }

/* a segment from the driver, in the free pool as one free block; NULL with an error set */
static Block *new_segment(AllocatorObject *self, long long rounded, int small, long long stream_id,
                          long long size, PyObject *tag) {
    long long seg_size;
    if (small)
        seg_size = self->small_segment;
    else if (rounded < self->large_threshold)
        seg_size = self->large_segment;
    else
        seg_size = round_up(rounded, self->huge_page);
    if (seg_size < rounded) seg_size = round_up(rounded, self->huge_page);
    PyObject *got = PyObject_CallMethod((PyObject *)self, "_segment_address", "LLLO", seg_size,
                                        size, stream_id, tag);
    if (got == NULL) return NULL;
    const long long address = PyLong_AsLongLong(got);
    Py_DECREF(got);
    if (address == -1 && PyErr_Occurred()) return NULL;
    if (self->n_segments == self->cap_segments) {
        const Py_ssize_t cap = self->cap_segments ? self->cap_segments * 2 : 16;
        Segment **segments = PyMem_Realloc(self->segments, sizeof(Segment *) * (size_t)cap);
        if (segments == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        self->segments = segments;
        self->cap_segments = cap;
    }
    Segment *seg = PyMem_Malloc(sizeof(Segment));
    if (seg == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    seg->address = address;
    seg->size = seg_size;
    seg->stream_id = stream_id;
    seg->allocated_bytes = 0;
    seg->small = small;
    Block *block = block_new(self, address, seg_size, stream_id, seg, NULL);
    if (block == NULL) {
        PyMem_Free(seg);
        return NULL;
    }
    seg->head = block;
    self->segments[self->n_segments++] = seg;
    self->reserved += seg_size;
    self->num_device_alloc++;
    if (self->reserved > self->peak_reserved) self->peak_reserved = self->reserved;
    if (emit(self, A_SEGMENT_ALLOC, address, seg_size, stream_id, self->empty) < 0) return NULL;
    return block;
}

/* malloc for size > 0: the live block, or NULL with an error set */
static Block *allocate(AllocatorObject *self, long long size, long long stream_id,
                       PyObject *tag) {
    const long long rnd = self->round;
    const long long rounded = round_up(size, rnd);
    const int small = rounded <= self->small_max;
    FreePool *pool = pool_of(self, small, stream_id, 0);
    Block *block = NULL;
    if (pool != NULL && pool->n) {
        const Py_ssize_t i = pool_lower_bound(pool, rounded, -1);
        if (i < pool->n) {
            block = pool->entries[i].block;
            memmove(pool->entries + i, pool->entries + i + 1,
                    sizeof(FreeEntry) * (size_t)(pool->n - i - 1));
            pool->n--;
        }
    }
    if (block == NULL) {
        block = new_segment(self, rounded, small, stream_id, size, tag);
        if (block == NULL) return NULL;
    }
    Segment *seg = block->segment;
    const long long rest_size = block->size - rounded;
    if (small ? rest_size >= rnd : rest_size > self->small_max) {
        Block *rest = block_new(self, block->address + rounded, rest_size, stream_id, seg, block);
        if (rest == NULL) return NULL;
        rest->next = block->next;
        if (block->next != NULL) block->next->prev = rest;
        block->next = rest;
        block->size = rounded;
        if (cache_block(self, rest) < 0) return NULL;
    }
    block->allocated = 1;
    block->requested = size;
    set_tag(block, tag);
    if (live_put(&self->live, block->address, block) < 0) return NULL;
    if (seg->allocated_bytes)
        self->inactive_split -= block->size;
    else
        self->inactive_split += seg->size - block->size;
    seg->allocated_bytes += block->size;
    self->allocated += block->size;
    self->requested += size;
    self->num_allocs++;
    if (self->allocated > self->peak_allocated) self->peak_allocated = self->allocated;
    if (self->requested > self->peak_requested) self->peak_requested = self->requested;
    if (emit(self, A_MALLOC, block->address, block->size, stream_id, tag) < 0) return NULL;
    return block;
}

/* free: 0 done, -1 error set */
static int release(AllocatorObject *self, long long address) {
    Block *block = live_pop(&self->live, address);
    if (block == NULL) {
        if (address == 0) return 0;
        char hex[32]; /* PyErr_Format has no %llx */
        snprintf(hex, sizeof hex, "%llx", (unsigned long long)address);
        PyErr_Format(self->error,
                     "caching allocator: 0x%s is not a live block (never allocated by this "
                     "allocator, or already freed)",
                     hex);
        return -1;
    }
    Segment *seg = block->segment;
    const long long size = block->size, stream_id = block->stream_id;
    PyObject *tag = block->tag;
    Py_INCREF(tag);
    seg->allocated_bytes -= size;
    if (seg->allocated_bytes)
        self->inactive_split += size;
    else
        self->inactive_split -= seg->size - size;
    self->allocated -= size;
    self->requested -= block->requested;
    self->num_frees++;
    block->allocated = 0;
    block->requested = 0;
    set_tag(block, self->empty);

    Block *prev = block->prev;
    if (prev != NULL && !prev->allocated) {
        uncache_block(self, prev);
        prev->size += block->size;
        prev->next = block->next;
        if (block->next != NULL) block->next->prev = prev;
        if (seg->head == block) seg->head = prev;
        block_free(block);
        block = prev;
    }
    Block *next = block->next;
    if (next != NULL && !next->allocated) {
        uncache_block(self, next);
        block->size += next->size;
        block->next = next->next;
        if (next->next != NULL) next->next->prev = block;
        block_free(next);
    }
    int rc = cache_block(self, block);
    if (rc == 0) rc = emit(self, A_FREE, address, size, stream_id, tag);
    Py_DECREF(tag);
    return rc;
}

/* ---- the block view malloc returns -------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    long long address, size, requested, stream_id;
    PyObject *tag;
    char allocated;
} BlockViewObject;

static PyTypeObject BlockViewType;

static PyObject *block_view(long long address, long long size, long long requested,
                            long long stream_id, PyObject *tag, int allocated) {
    BlockViewObject *v = PyObject_New(BlockViewObject, &BlockViewType);
    if (v == NULL) return NULL;
    v->address = address;
    v->size = size;
    v->requested = requested;
    v->stream_id = stream_id;
    Py_INCREF(tag);
    v->tag = tag;
    v->allocated = (char)allocated;
    return (PyObject *)v;
}

static void BlockView_dealloc(BlockViewObject *self) {
    Py_XDECREF(self->tag);
    PyObject_Free(self);
}

static PyObject *BlockView_repr(BlockViewObject *self) {
    return PyUnicode_FromFormat("Block(address=%lld, size=%lld, requested=%lld, stream_id=%lld)",
                                self->address, self->size, self->requested, self->stream_id);
}

static PyMemberDef BlockView_members[] = {
    {"address", T_LONGLONG, offsetof(BlockViewObject, address), READONLY, NULL},
    {"size", T_LONGLONG, offsetof(BlockViewObject, size), READONLY, NULL},
    {"requested", T_LONGLONG, offsetof(BlockViewObject, requested), READONLY, NULL},
    {"stream_id", T_LONGLONG, offsetof(BlockViewObject, stream_id), READONLY, NULL},
    {"tag", T_OBJECT, offsetof(BlockViewObject, tag), READONLY, NULL},
    {"allocated", T_BOOL, offsetof(BlockViewObject, allocated), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject BlockViewType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprof_device_core.Block",
    .tp_basicsize = sizeof(BlockViewObject),
    .tp_dealloc = (destructor)BlockView_dealloc,
    .tp_repr = (reprfunc)BlockView_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A block of the compiled caching allocator, as it was when malloc returned it.",
    .tp_members = BlockView_members,
};

/* ---- the handle hold returns ------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    AllocatorObject *allocator; /* owned */
    long long address;
} HandleObject;

static PyTypeObject HandleType;

static void Handle_dealloc(HandleObject *self) {
    if (self->allocator != NULL) {
        /* like a __del__: an error freeing is dropped and an exception in flight is kept;
           but a KeyboardInterrupt or SystemExit (a signal handler ran in a record callback)
           is kept for the next call into the allocator, not lost as in a __del__ */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (release(self->allocator, self->address) < 0) {
            if (PyErr_ExceptionMatches(PyExc_Exception)) {
                PyErr_Clear();
            } else {
                PyObject *t, *v, *tb;
                PyErr_Fetch(&t, &v, &tb);
                PyErr_NormalizeException(&t, &v, &tb);
                if (tb != NULL && v != NULL) PyException_SetTraceback(v, tb);
                if (v != NULL && self->allocator->deferred == NULL) {
                    Py_INCREF(v);
                    self->allocator->deferred = v;
                }
                Py_XDECREF(t);
                Py_XDECREF(v);
                Py_XDECREF(tb);
            }
        }
        PyErr_Restore(type, value, traceback);
        Py_CLEAR(self->allocator);
    }
    PyObject_Free(self);
}

/* raise what a dying handle deferred: -1 with it set, else 0 */
static int raise_deferred(AllocatorObject *self) {
    PyObject *deferred = self->deferred;
    if (deferred == NULL) return 0;
    self->deferred = NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(deferred), deferred);
    Py_DECREF(deferred);
    return -1;
}

static PyMemberDef Handle_members[] = {
    {"address", T_LONGLONG, offsetof(HandleObject, address), READONLY,
     "the block's device address"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprof_device_core.Handle",
    .tp_basicsize = sizeof(HandleObject),
    .tp_dealloc = (destructor)Handle_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Device memory held until this handle dies (then freed to the allocator).",
    .tp_members = Handle_members,
};

/* ---- the allocator type ------------------------------------------------------------------------ */

static void allocator_reset(AllocatorObject *self) {
    for (Py_ssize_t i = 0; i < self->n_segments; i++) {
        Segment *seg = self->segments[i];
        Block *b = seg->head;
        while (b != NULL) {
            Block *next = b->next;
            block_free(b);
            b = next;
        }
        PyMem_Free(seg);
    }
    PyMem_Free(self->segments);
    self->segments = NULL;
    self->n_segments = self->cap_segments = 0;
    for (Py_ssize_t i = 0; i < self->n_pools; i++) PyMem_Free(self->pools[i].entries);
    PyMem_Free(self->pools);
    self->pools = NULL;
    self->n_pools = 0;
    PyMem_Free(self->live.keys);
    PyMem_Free(self->live.values);
    self->live = (LiveMap){NULL, NULL, 0, 0};
}

static int Allocator_traverse(AllocatorObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->deferred);
    Py_VISIT(self->actions);
    Py_VISIT(self->error);
    return 0;
}

static int Allocator_clear(AllocatorObject *self) {
    Py_CLEAR(self->deferred);
    Py_CLEAR(self->actions);
    Py_CLEAR(self->error);
    return 0;
}

static void Allocator_dealloc(AllocatorObject *self) {
    PyObject_GC_UnTrack(self);
    Allocator_clear(self);
    allocator_reset(self);
    Py_CLEAR(self->empty);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Allocator_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    (void)args;
    (void)kwargs;
    AllocatorObject *self = (AllocatorObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->empty = PyUnicode_FromString("");
    if (self->empty == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int allocator_ready(AllocatorObject *self) {
    if (self->actions == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "AllocatorCore used before _core_setup");
        return -1;
    }
    return 0;
}

static PyObject *Allocator_setup(AllocatorObject *self, PyObject *args) {
    PyObject *actions, *error;
    if (!PyArg_ParseTuple(args, "LLLLLLO!O", &self->round, &self->small_max,
                          &self->small_segment, &self->large_segment, &self->large_threshold,
                          &self->huge_page, &PyTuple_Type, &actions, &error))
        return NULL;
    if (PyTuple_GET_SIZE(actions) != 4 || self->round < 1 || self->huge_page < 1) {
        PyErr_SetString(PyExc_ValueError, "_core_setup: bad allocation settings");
        return NULL;
    }
    Py_INCREF(actions);
    Py_XSETREF(self->actions, actions);
    Py_INCREF(error);
    Py_XSETREF(self->error, error);
    allocator_reset(self);
    self->allocated = self->requested = self->reserved = self->inactive_split = 0;
    self->peak_allocated = self->peak_reserved = self->peak_requested = 0;
    self->num_allocs = self->num_frees = self->num_device_alloc = self->num_device_free = 0;
    self->num_alloc_retries = self->num_ooms = 0;
    Py_RETURN_NONE;
}

static int parse_request(AllocatorObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames, const char *what, long long *size,
                         long long *stream_id, PyObject **tag) {
    *stream_id = 0;
    *tag = self->empty;
    if (nargs < 1 || nargs > 3) {
        PyErr_Format(PyExc_TypeError, "%s(size, *, stream_id=0, tag='')", what);
        return -1;
    }
    if ((*size = PyLong_AsLongLong(args[0])) == -1 && PyErr_Occurred()) return -1;
    PyObject *stream_obj = nargs > 1 ? args[1] : NULL;
    if (nargs > 2) *tag = args[2];
    if (kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, i);
            if (PyUnicode_CompareWithASCIIString(key, "stream_id") == 0)
                stream_obj = args[nargs + i];
            else if (PyUnicode_CompareWithASCIIString(key, "tag") == 0)
                *tag = args[nargs + i];
            else {
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword %R", what, key);
                return -1;
            }
        }
    }
    if (stream_obj != NULL && (*stream_id = PyLong_AsLongLong(stream_obj)) == -1 &&
        PyErr_Occurred())
        return -1;
    if (raise_deferred(self) < 0) return -1;
    return allocator_ready(self);
}

static PyObject *Allocator_malloc(AllocatorObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    long long size, stream_id;
    PyObject *tag;
    if (parse_request(self, args, nargs, kwnames, "malloc", &size, &stream_id, &tag) < 0)
        return NULL;
    if (size <= 0) {
        if (size == 0) return block_view(0, 0, 0, stream_id, tag, 1);
        PyErr_Format(self->error, "caching allocator: size must be >= 0, got %lld", size);
        return NULL;
    }
    Block *b = allocate(self, size, stream_id, tag);
    if (b == NULL) return NULL;
    return block_view(b->address, b->size, b->requested, b->stream_id, b->tag, 1);
}

/* hold(size, stream_id, tag) -> Handle, or None for size 0 */
static PyObject *Allocator_hold(AllocatorObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    long long size, stream_id;
    PyObject *tag;
    if (parse_request(self, args, nargs, kwnames, "hold", &size, &stream_id, &tag) < 0)
        return NULL;
    if (size <= 0) {
        if (size == 0) Py_RETURN_NONE;
        PyErr_Format(self->error, "caching allocator: size must be >= 0, got %lld", size);
        return NULL;
    }
    Block *b = allocate(self, size, stream_id, tag);
    if (b == NULL) return NULL;
    HandleObject *h = PyObject_New(HandleObject, &HandleType);
    if (h == NULL) {
        release(self, b->address);
        return NULL;
    }
    Py_INCREF(self);
    h->allocator = self;
    h->address = b->address;
    return (PyObject *)h;
}

static PyObject *Allocator_free(AllocatorObject *self, PyObject *arg) {
    const long long address = PyLong_AsLongLong(arg);
    if (address == -1 && PyErr_Occurred()) return NULL;
    if (raise_deferred(self) < 0 || allocator_ready(self) < 0 || release(self, address) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Allocator_empty_cache(AllocatorObject *self, PyObject *unused) {
    (void)unused;
    if (allocator_ready(self) < 0) return NULL;
    Py_ssize_t i = 0;
    while (i < self->n_segments) {
        Segment *seg = self->segments[i];
        if (seg->allocated_bytes) {
            i++;
            continue;
        }
        Block *head = seg->head;
        uncache_block(self, head);
        PyObject *res = PyObject_CallMethod((PyObject *)self, "_release_segment", "L",
                                            seg->address);
        if (res == NULL) return NULL;
        Py_DECREF(res);
        memmove(self->segments + i, self->segments + i + 1,
                sizeof(Segment *) * (size_t)(self->n_segments - i - 1));
        self->n_segments--;
        self->reserved -= seg->size;
        self->num_device_free++;
        const long long address = seg->address, size = seg->size, stream_id = seg->stream_id;
        block_free(head);
        PyMem_Free(seg);
        if (emit(self, A_SEGMENT_FREE, address, size, stream_id, self->empty) < 0) return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Allocator_block_size(AllocatorObject *self, PyObject *arg) {
    const long long address = PyLong_AsLongLong(arg);
    if (address == -1 && PyErr_Occurred()) return NULL;
    Block *b = live_get(&self->live, address);
    return PyLong_FromLongLong(b != NULL ? b->size : 0);
}

static int compare_address(const void *a, const void *b) {
    const long long x = (*(Block *const *)a)->address, y = (*(Block *const *)b)->address;
    return (x > y) - (x < y);
}

static int compare_segment(const void *a, const void *b) {
    const long long x = (*(Segment *const *)a)->address, y = (*(Segment *const *)b)->address;
    return (x > y) - (x < y);
}

/* live_blocks(): every live block by address */
static PyObject *Allocator_live_list(AllocatorObject *self, PyObject *unused) {
    (void)unused;
    Block **blocks = PyMem_Malloc(sizeof(Block *) * (size_t)(self->live.n + 1));
    if (blocks == NULL) return PyErr_NoMemory();
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < self->live.cap; i++)
        if (self->live.values[i] != NULL) blocks[n++] = self->live.values[i];
    qsort(blocks, (size_t)n, sizeof(Block *), compare_address);
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        Block *b = blocks[i];
        PyObject *v = block_view(b->address, b->size, b->requested, b->stream_id, b->tag, 1);
        if (v == NULL) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, v);
    }
    PyMem_Free(blocks);
    return list;
}

/* _segments_by_address(): [(address, size, allocated, stream, small, [(address, size,
   requested, allocated, tag), ...]), ...] */
static PyObject *Allocator_segments(AllocatorObject *self, PyObject *unused) {
    (void)unused;
    Segment **sorted = PyMem_Malloc(sizeof(Segment *) * (size_t)(self->n_segments + 1));
    if (sorted == NULL) return PyErr_NoMemory();
    memcpy(sorted, self->segments, sizeof(Segment *) * (size_t)self->n_segments);
    qsort(sorted, (size_t)self->n_segments, sizeof(Segment *), compare_segment);
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out != NULL && i < self->n_segments; i++) {
        Segment *seg = sorted[i];
        PyObject *blocks = PyList_New(0);
        for (Block *b = seg->head; blocks != NULL && b != NULL; b = b->next) {
            PyObject *item = Py_BuildValue("(LLLOO)", b->address, b->size, b->requested,
                                           b->allocated ? Py_True : Py_False, b->tag);
            if (item == NULL || PyList_Append(blocks, item) < 0) Py_CLEAR(blocks);
            Py_XDECREF(item);
        }
        PyObject *entry = blocks == NULL ? NULL
                                         : Py_BuildValue("(LLLLON)", seg->address, seg->size,
                                                         seg->allocated_bytes, seg->stream_id,
                                                         seg->small ? Py_True : Py_False, blocks);
        if (entry == NULL || PyList_Append(out, entry) < 0) Py_CLEAR(out);
        Py_XDECREF(entry);
    }
    PyMem_Free(sorted);
    return out;
}

static PyObject *Allocator_largest_free(AllocatorObject *self, PyObject *unused) {
    (void)unused;
    long long largest = 0;
    for (Py_ssize_t i = 0; i < self->n_pools; i++) {
        const FreePool *p = &self->pools[i];
        if (p->n && p->entries[p->n - 1].size > largest) largest = p->entries[p->n - 1].size;
    }
    return PyLong_FromLongLong(largest);
}

static PyObject *Allocator_live_count(AllocatorObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromSsize_t(self->live.n);
}

static PyObject *Allocator_segment_count(AllocatorObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromSsize_t(self->n_segments);
}

static PyMethodDef Allocator_methods[] = {
    {"_core_setup", (PyCFunction)Allocator_setup, METH_VARARGS,
     "_core_setup(round, small_max, small_segment, large_segment, large_threshold, huge_page, "
     "actions, device_error): configure and empty the allocator."},
    {"malloc", (PyCFunction)(void (*)(void))Allocator_malloc, METH_FASTCALL | METH_KEYWORDS,
     "Allocate `size` bytes for use on `stream_id`; `tag` names the holder."},
    {"hold", (PyCFunction)(void (*)(void))Allocator_hold, METH_FASTCALL | METH_KEYWORDS,
     "malloc, returned as a handle that frees the block when it dies (None for size 0)."},
    {"free", (PyCFunction)Allocator_free, METH_O, "Return the block at `address` to the cache."},
    {"empty_cache", (PyCFunction)Allocator_empty_cache, METH_NOARGS,
     "Give every entirely free segment back to the driver."},
    {"block_size", (PyCFunction)Allocator_block_size, METH_O,
     "Size of the live block at `address` (0 when none is live there)."},
    {"_live_list", (PyCFunction)Allocator_live_list, METH_NOARGS, "Live blocks by address."},
    {"_segments_by_address", (PyCFunction)Allocator_segments, METH_NOARGS,
     "Segments by address with their blocks."},
    {"_largest_free", (PyCFunction)Allocator_largest_free, METH_NOARGS,
     "The largest cached free block."},
    {"_live_count", (PyCFunction)Allocator_live_count, METH_NOARGS, "Live blocks."},
    {"_segment_count", (PyCFunction)Allocator_segment_count, METH_NOARGS, "Segments."},
    {NULL, NULL, 0, NULL},
};

#define STAT(name, field) {name, T_LONGLONG, offsetof(AllocatorObject, field), 0, NULL}

static PyMemberDef Allocator_members[] = {
    STAT("_allocated", allocated),
    STAT("_requested", requested),
    STAT("_reserved", reserved),
    STAT("_inactive_split", inactive_split),
    STAT("_peak_allocated", peak_allocated),
    STAT("_peak_reserved", peak_reserved),
    STAT("_peak_requested", peak_requested),
    STAT("_num_allocs", num_allocs),
    STAT("_num_frees", num_frees),
    STAT("_num_device_alloc", num_device_alloc),
    STAT("_num_device_free", num_device_free),
    STAT("_num_alloc_retries", num_alloc_retries),
    STAT("_num_ooms", num_ooms),
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject AllocatorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprof_device_core.AllocatorCore",
    .tp_basicsize = sizeof(AllocatorObject),
    .tp_dealloc = (destructor)Allocator_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The caching allocator's blocks, pools and statistics (subclassed by "
              "CachingAllocator).",
    .tp_traverse = (traverseproc)Allocator_traverse,
    .tp_clear = (inquiry)Allocator_clear,
    .tp_methods = Allocator_methods,
    .tp_members = Allocator_members,
    .tp_new = Allocator_new,
};

int add_allocator_types(PyObject *m) {
    if ((s_bus_attr = PyUnicode_InternFromString("_bus")) == NULL ||
        (s_active_attr = PyUnicode_InternFromString("active")) == NULL ||
        (s_clock_attr = PyUnicode_InternFromString("_clock")) == NULL)
        return -1;
    if (PyType_Ready(&BlockViewType) < 0 || PyType_Ready(&HandleType) < 0 ||
        PyType_Ready(&AllocatorType) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "Block", (PyObject *)&BlockViewType) < 0 ||
        PyModule_AddObjectRef(m, "Handle", (PyObject *)&HandleType) < 0 ||
        PyModule_AddObjectRef(m, "AllocatorCore", (PyObject *)&AllocatorType) < 0)
        return -1;
    return 0;
}
