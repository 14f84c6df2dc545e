/*
 * The compiled scheduling core of the simulated NPU's engine (msprof_py/device/native).
 *
 * Plain C against the CPython API, no torch (the caching allocator's core, allocator_core.c, is
 * built into the same module): the same state and the same arithmetic as the
 * pure-Python core (msprof_py/device/schedule.py), which stays the reference and runs wherever
 * this module is not built. Three types:
 *
 *   Pool        the step function of units in use over virtual time (ResourcePool's API);
 *   Stream      an in-order queue: its tail, whether it has tasks, the end times in flight;
 *   EngineCore  the host clock, the task queue, task ids and the placing of tasks on streams
 *               and pools. msprof_py.device.engine.Engine subclasses it and adds everything
 *               else in Python (copies, events, graphs, records).
 *
 * Every time is an int64 of nanoseconds. Indices follow Python's list semantics where the
 * Python core's arithmetic can reach index -1 (a time before the first segment), so both cores
 * give identical answers on every input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define ABI_VERSION 4
#define PRUNE_EVERY 256

/* ---- a growable ring of int64 (the Python core's deque) --------------------------------- */

typedef struct {
    long long *buf;
    Py_ssize_t cap, head, len;
} Ring;

static int ring_push(Ring *r, long long v) {
    if (r->len == r->cap) {
        Py_ssize_t cap = r->cap ? r->cap * 2 : 8;
        long long *buf = PyMem_Malloc(sizeof(long long) * (size_t)cap);
        if (buf == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < r->len; i++) buf[i] = r->buf[(r->head + i) % r->cap];
        PyMem_Free(r->buf);
        r->buf = buf;
        r->cap = cap;
        r->head = 0;
    }
    r->buf[(r->head + r->len) % r->cap] = v;
    r->len++;
    return 0;
}

static inline long long ring_front(const Ring *r) { return r->buf[r->head]; }

static inline void ring_pop(Ring *r) {
    r->head = (r->head + 1) % r->cap;
    r->len--;
}

/* pop every value <= t from the front */
static inline void ring_drop_until(Ring *r, long long t) {
    while (r->len && ring_front(r) <= t) ring_pop(r);
}

static PyObject *ring_list(const Ring *r) {
    PyObject *list = PyList_New(r->len);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < r->len; i++) {
        PyObject *v = PyLong_FromLongLong(r->buf[(r->head + i) % r->cap]);
        if (v == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, v);
    }
    return list;
}

static void ring_free(Ring *r) {
    PyMem_Free(r->buf);
    r->buf = NULL;
    r->cap = r->len = r->head = 0;
}

/* ---- Pool ---------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *name;
    long long capacity;
    long long *times;
    long long *used;
    Py_ssize_t n, alloc;
} PoolObject;

static PyTypeObject PoolType;

/* Python's list[k] for k in [-1, n) */
#define AT(arr, k, n) ((arr)[(k) < 0 ? (k) + (n) : (k)])

/* bisect_right(times, t) - 1 */
static Py_ssize_t pool_find(const PoolObject *p, long long t) {
    Py_ssize_t lo = 0, hi = p->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (t < p->times[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo - 1;
}

/* first time >= t at which `units` units stay free for `duration` ns; -1 with an error set if
   the timeline has no idle end (which the reserve arithmetic never leaves) */
static long long pool_earliest_c(const PoolObject *p, long long t, long long units,
                                 long long duration) {
    const long long *times = p->times, *used = p->used;
    const Py_ssize_t n = p->n, last = n - 1;
    const long long cap = p->capacity - (units < p->capacity ? units : p->capacity);
    const long long span = duration > 0 ? duration : 1;
    long long start = t;
    Py_ssize_t i = pool_find(p, start);
    for (;;) {
        Py_ssize_t k = i;
        const long long end = start + span;
        int busy = 0;
        while (k <= last && AT(times, k, n) < end) {
            if (AT(used, k, n) > cap) {
                busy = 1;
                break;
            }
            k++;
        }
        if (!busy) return start;
        if (k + 1 > last) {
            PyErr_SetString(PyExc_IndexError, "resource pool timeline has no idle end");
            return -1;
        }
        start = AT(times, k + 1, n);
        i = k + 1;
    }
}

static int pool_grow(PoolObject *p) {
    if (p->n < p->alloc) return 0;
    Py_ssize_t alloc = p->alloc ? p->alloc * 2 : 16;
    long long *times = PyMem_Realloc(p->times, sizeof(long long) * (size_t)alloc);
    if (times == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    p->times = times;
    long long *used = PyMem_Realloc(p->used, sizeof(long long) * (size_t)alloc);
    if (used == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    p->used = used;
    p->alloc = alloc;
    return 0;
}

/* make t a segment boundary; the index of the segment starting at t (-2 on error) */
static Py_ssize_t pool_split(PoolObject *p, long long t) {
    Py_ssize_t i = pool_find(p, t);
    if (AT(p->times, i, p->n) == t) return i;
    const long long carried = AT(p->used, i, p->n);
    if (pool_grow(p) < 0) return -2;
    const Py_ssize_t at = i + 1, tail = p->n - at;
    memmove(p->times + at + 1, p->times + at, sizeof(long long) * (size_t)tail);
    memmove(p->used + at + 1, p->used + at, sizeof(long long) * (size_t)tail);
    p->times[at] = t;
    p->used[at] = carried;
    p->n++;
    return at;
}

static int pool_reserve_c(PoolObject *p, long long start, long long end, long long units) {
    if (end <= start) return 0;
    if (units > p->capacity) units = p->capacity;
    const Py_ssize_t i = pool_split(p, start);
    if (i == -2) return -1;
    const Py_ssize_t j = pool_split(p, end);
    if (j == -2) return -1;
    for (Py_ssize_t k = i; k < j; k++) AT(p->used, k, p->n) += units;
    return 0;
}

static void pool_prune_c(PoolObject *p, long long horizon) {
    const Py_ssize_t i = pool_find(p, horizon);
    if (i > 0) {
        memmove(p->times, p->times + i, sizeof(long long) * (size_t)(p->n - i));
        memmove(p->used, p->used + i, sizeof(long long) * (size_t)(p->n - i));
        p->n -= i;
    }
}

static PyObject *Pool_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"name", "capacity", NULL};
    PyObject *name;
    long long capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OL", names, &name, &capacity)) return NULL;
    if (capacity < 1) {
        PyErr_Format(PyExc_ValueError, "resource pool %R needs at least one unit", name);
        return NULL;
    }
    PoolObject *self = (PoolObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(name);
    self->name = name;
    self->capacity = capacity;
    if (pool_grow(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->times[0] = 0;
    self->used[0] = 0;
    self->n = 1;
    return (PyObject *)self;
}

static void Pool_dealloc(PoolObject *self) {
    Py_XDECREF(self->name);
    PyMem_Free(self->times);
    PyMem_Free(self->used);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Pool_earliest(PoolObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long t, units, duration;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "earliest(t, units, duration)");
        return NULL;
    }
    if ((t = PyLong_AsLongLong(args[0])) == -1 && PyErr_Occurred()) return NULL;
    if ((units = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred()) return NULL;
    if ((duration = PyLong_AsLongLong(args[2])) == -1 && PyErr_Occurred()) return NULL;
    const long long start = pool_earliest_c(self, t, units, duration);
    if (start == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLongLong(start);
}

static PyObject *Pool_reserve(PoolObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long start, end, units;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "reserve(start, end, units)");
        return NULL;
    }
    if ((start = PyLong_AsLongLong(args[0])) == -1 && PyErr_Occurred()) return NULL;
    if ((end = PyLong_AsLongLong(args[1])) == -1 && PyErr_Occurred()) return NULL;
    if ((units = PyLong_AsLongLong(args[2])) == -1 && PyErr_Occurred()) return NULL;
    if (pool_reserve_c(self, start, end, units) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Pool_prune(PoolObject *self, PyObject *arg) {
    const long long horizon = PyLong_AsLongLong(arg);
    if (horizon == -1 && PyErr_Occurred()) return NULL;
    pool_prune_c(self, horizon);
    Py_RETURN_NONE;
}

static PyObject *Pool_busy_units(PoolObject *self, PyObject *arg) {
    const long long t = PyLong_AsLongLong(arg);
    if (t == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t i = pool_find(self, t);
    return PyLong_FromLongLong(self->used[i > 0 ? i : 0]);
}

static Py_ssize_t Pool_len(PoolObject *self) { return self->n; }

static PyMethodDef Pool_methods[] = {
    {"earliest", (PyCFunction)(void (*)(void))Pool_earliest, METH_FASTCALL,
     "First time >= t at which `units` units stay free for `duration` ns."},
    {"reserve", (PyCFunction)(void (*)(void))Pool_reserve, METH_FASTCALL,
     "Book `units` units over [start, end)."},
    {"prune", (PyCFunction)Pool_prune, METH_O, "Forget the timeline before `horizon`."},
    {"busy_units", (PyCFunction)Pool_busy_units, METH_O, "Units in use at time t."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Pool_members[] = {
    {"name", T_OBJECT, offsetof(PoolObject, name), READONLY, "the pool's name"},
    {"capacity", T_LONGLONG, offsetof(PoolObject, capacity), READONLY, "units in the pool"},
    {NULL, 0, 0, 0, NULL},
};

static PySequenceMethods Pool_as_sequence = {.sq_length = (lenfunc)Pool_len};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprof_device_core.Pool",
    .tp_basicsize = sizeof(PoolObject),
    .tp_dealloc = (destructor)Pool_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A step-function timeline of how many of `capacity` units are busy.",
    .tp_methods = Pool_methods,
    .tp_members = Pool_members,
    .tp_as_sequence = &Pool_as_sequence,
    .tp_new = Pool_new,
};

/* ---- Stream -------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    long long stream_id;
    long long priority;
    long long tail_ns;
    char has_tasks;
    char destroyed;
    Ring inflight;
} StreamObject;

static PyTypeObject StreamType;

static PyObject *Stream_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"stream_id", "priority", NULL};
    long long stream_id, priority = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "L|L", names, &stream_id, &priority))
        return NULL;
    StreamObject *self = (StreamObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->stream_id = stream_id;
    self->priority = priority;
    return (PyObject *)self;
}

static void Stream_dealloc(StreamObject *self) {
    ring_free(&self->inflight);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Stream_repr(StreamObject *self) {
    return PyUnicode_FromFormat("Stream(id=%lld)", self->stream_id);
}

static PyObject *Stream_inflight(StreamObject *self, void *closure) {
    (void)closure;
    return ring_list(&self->inflight);
}

static PyMemberDef Stream_members[] = {
    {"stream_id", T_LONGLONG, offsetof(StreamObject, stream_id), READONLY, NULL},
    {"priority", T_LONGLONG, offsetof(StreamObject, priority), 0, NULL},
    {"tail_ns", T_LONGLONG, offsetof(StreamObject, tail_ns), 0,
     "when the last task submitted to this stream ends"},
    {"has_tasks", T_BOOL, offsetof(StreamObject, has_tasks), 0, NULL},
    {"destroyed", T_BOOL, offsetof(StreamObject, destroyed), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Stream_getset[] = {
    {"inflight", (getter)Stream_inflight, NULL,
     "end times of tasks that may still be running (a copy)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StreamType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprof_device_core.Stream",
    .tp_basicsize = sizeof(StreamObject),
    .tp_dealloc = (destructor)Stream_dealloc,
    .tp_repr = (reprfunc)Stream_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An in-order queue of device tasks.",
    .tp_members = Stream_members,
    .tp_getset = Stream_getset,
    .tp_new = Stream_new,
};

/* ---- EngineCore ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    long long host_ns;
    long long stage2_free_ns;
    long long next_task_id;
    long long tasks_submitted;
    long long since_prune;
    Ring queued;
    /* configuration (_core_setup) */
    long long stage1_ns, stage2_ns, stream_depth, task_queue_depth, sync_ns;
    int task_queue;
    PyObject *streams; /* dict: stream id -> Stream */
    PyObject *pools;   /* dict: name -> Pool */
    PyObject *demands; /* dict: (task type, block dim) -> ((Pool, units), ...) */
    PyObject *error;   /* DeviceError */
} CoreObject;

/* rows_core.c: the recorder's direct row sink */
PyObject *bus_sink(PyObject *bus);
int sink_sync(PyObject *sink, PyObject *name, long long start, long long end,
              long long stream_id);
int sink_kernel(PyObject *sink, long long host_start, long long host_end, long long stream_id,
                long long task_id, long long launch, long long start, long long end,
                long long wait, PyObject *cost, PyObject *name, PyObject *op_type,
                PyObject *tensors, PyObject *attrs);

static PyObject *s_bus, *s_active, *s_task_type, *s_block_dim, *s_duration_ns, *s_on_block,
    *s_demand, *s_emit_kernel, *s_stream_full, *s_queue_full;

static int Core_traverse(CoreObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->streams);
    Py_VISIT(self->pools);
    Py_VISIT(self->demands);
    Py_VISIT(self->error);
    return 0;
}

static int Core_clear(CoreObject *self) {
    Py_CLEAR(self->streams);
    Py_CLEAR(self->pools);
    Py_CLEAR(self->demands);
    Py_CLEAR(self->error);
    return 0;
}

static void Core_dealloc(CoreObject *self) {
    PyObject_GC_UnTrack(self);
    Core_clear(self);
    ring_free(&self->queued);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int core_ready(CoreObject *self) {
    if (self->streams == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "EngineCore used before _core_setup");
        return -1;
    }
    return 0;
}

static PyObject *Core_setup(CoreObject *self, PyObject *args) {
    PyObject *streams, *pools, *demands, *error;
    int task_queue;
    if (!PyArg_ParseTuple(args, "LLLpLLO!O!O!O", &self->stage1_ns, &self->stage2_ns,
                          &self->stream_depth, &task_queue, &self->task_queue_depth,
                          &self->sync_ns, &PyDict_Type, &streams, &PyDict_Type, &pools,
                          &PyDict_Type, &demands, &error))
        return NULL;
    self->task_queue = task_queue;
    Py_INCREF(streams);
    Py_XSETREF(self->streams, streams);
    Py_INCREF(pools);
    Py_XSETREF(self->pools, pools);
    Py_INCREF(demands);
    Py_XSETREF(self->demands, demands);
    Py_INCREF(error);
    Py_XSETREF(self->error, error);
    self->host_ns = self->stage2_free_ns = 0;
    self->next_task_id = self->tasks_submitted = self->since_prune = 0;
    self->queued.len = self->queued.head = 0;
    Py_RETURN_NONE;
}

static int core_check(CoreObject *self, PyObject *obj) {
    if (!Py_IS_TYPE(obj, &StreamType)) {
        PyErr_Format(PyExc_TypeError, "expected a Stream, got %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    StreamObject *s = (StreamObject *)obj;
    if (!s->destroyed) {
        PyObject *key = PyLong_FromLongLong(s->stream_id);
        if (key == NULL) return -1;
        PyObject *found = PyDict_GetItemWithError(self->streams, key);
        Py_DECREF(key);
        if (found == obj) return 0;
        if (found == NULL && PyErr_Occurred()) return -1;
    }
    PyErr_Format(self->error, "stream %lld does not exist on this device", s->stream_id);
    return -1;
}

/* block the host until device time t, pay the return, and record it: the recorder's row
   written here when it is the one subscriber, else the engine told (_on_block) */
static int core_block(CoreObject *self, long long t, PyObject *name, long long stream_id) {
    const long long start = self->host_ns;
    self->host_ns = (start > t ? start : t) + self->sync_ns;
    PyObject *bus = PyObject_GetAttr((PyObject *)self, s_bus);
    if (bus == NULL) return -1;
    PyObject *direct = bus_sink(bus);
    Py_DECREF(bus);
    if (direct != NULL) {
        const int written = sink_sync(direct, name, start, self->host_ns, stream_id);
        Py_DECREF(direct);
        return written;
    }
    if (PyErr_Occurred()) return -1;
    PyObject *py_start = PyLong_FromLongLong(start);
    PyObject *py_stream = PyLong_FromLongLong(stream_id);
    PyObject *res = NULL;
    if (py_start != NULL && py_stream != NULL)
        res = PyObject_CallMethodObjArgs((PyObject *)self, s_on_block, name, py_start, py_stream,
                                         NULL);
    Py_XDECREF(py_start);
    Py_XDECREF(py_stream);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}

static int core_launch(CoreObject *self, StreamObject *s, long long stage1, long long stage2,
                       long long *host_start, long long *launch) {
    if (core_check(self, (PyObject *)s) < 0) return -1;
    Ring *inflight = &s->inflight;
    ring_drop_until(inflight, self->host_ns);
    if (inflight->len && inflight->len >= self->stream_depth) {
        if (core_block(self, ring_front(inflight), s_stream_full, s->stream_id) < 0) return -1;
        ring_drop_until(inflight, self->host_ns);
    }
    if (self->task_queue) {
        Ring *queue = &self->queued;
        ring_drop_until(queue, self->host_ns);
        if (queue->len && queue->len >= self->task_queue_depth) {
            if (core_block(self, ring_front(queue), s_queue_full, s->stream_id) < 0) return -1;
            ring_drop_until(queue, self->host_ns);
        }
        *host_start = self->host_ns;
        self->host_ns = *host_start + stage1;
        const long long free = self->stage2_free_ns;
        *launch = (self->host_ns > free ? self->host_ns : free) + stage2;
        self->stage2_free_ns = *launch;
        if (ring_push(queue, *launch) < 0) return -1;
    } else {
        *host_start = self->host_ns;
        self->host_ns = *host_start + stage1 + stage2;
        *launch = self->stage2_free_ns = self->host_ns;
    }
    return 0;
}

#define MAX_DEMAND 8

typedef struct {
    PoolObject *pool[MAX_DEMAND];
    long long units[MAX_DEMAND];
    Py_ssize_t n;
} Demand;

static int demand_parse(PyObject *demand, Demand *out) {
    if (!PyTuple_Check(demand)) {
        PyErr_SetString(PyExc_TypeError, "a demand is a tuple of (Pool, units) pairs");
        return -1;
    }
    const Py_ssize_t n = PyTuple_GET_SIZE(demand);
    if (n > MAX_DEMAND) {
        PyErr_SetString(PyExc_ValueError, "a task demands at most 8 pools");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(demand, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !Py_IS_TYPE(PyTuple_GET_ITEM(pair, 0), &PoolType)) {
            PyErr_SetString(PyExc_TypeError, "a demand is a tuple of (Pool, units) pairs");
            return -1;
        }
        out->pool[i] = (PoolObject *)PyTuple_GET_ITEM(pair, 0);
        out->units[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1));
        if (out->units[i] == -1 && PyErr_Occurred()) return -1;
    }
    out->n = n;
    return 0;
}

static long long core_earliest(const Demand *d, long long ready, long long duration) {
    long long start = ready;
    for (;;) {
        int moved = 0;
        for (Py_ssize_t i = 0; i < d->n; i++) {
            const long long t = pool_earliest_c(d->pool[i], start, d->units[i], duration);
            if (t == -1 && PyErr_Occurred()) return -1;
            if (t != start) {
                start = t;
                moved = 1;
            }
        }
        if (!moved) return start;
    }
}

static void core_prune(CoreObject *self) {
    self->since_prune = 0;
    const long long horizon =
        self->host_ns > self->stage2_free_ns ? self->host_ns : self->stage2_free_ns;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(self->pools, &pos, &key, &value))
        if (Py_IS_TYPE(value, &PoolType)) pool_prune_c((PoolObject *)value, horizon);
}

static int core_place(CoreObject *self, StreamObject *s, long long launch, long long duration,
                      const Demand *d, long long not_before, long long out[3]) {
    long long ready = launch > s->tail_ns ? launch : s->tail_ns;
    if (not_before > ready) ready = not_before;
    const long long start = d->n ? core_earliest(d, ready, duration) : ready;
    if (start == -1 && PyErr_Occurred()) return -1;
    const long long end = start + duration;
    for (Py_ssize_t i = 0; i < d->n; i++)
        if (pool_reserve_c(d->pool[i], start, end, d->units[i]) < 0) return -1;
    out[0] = start;
    out[1] = end;
    out[2] = s->has_tasks ? start - s->tail_ns : 0;
    s->tail_ns = end;
    s->has_tasks = 1;
    if (ring_push(&s->inflight, end) < 0) return -1;
    if (++self->since_prune >= PRUNE_EVERY) core_prune(self);
    return 0;
}

static inline long long core_new_task_id(CoreObject *self) {
    self->tasks_submitted++;
    return self->next_task_id++;
}

static int as_ll(PyObject *obj, long long *out) {
    *out = PyLong_AsLongLong(obj);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int as_stream(PyObject *obj, StreamObject **out) {
    if (!Py_IS_TYPE(obj, &StreamType)) {
        PyErr_Format(PyExc_TypeError, "expected a Stream, got %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    *out = (StreamObject *)obj;
    return 0;
}

/* _launch(stream, stage1, stage2, name) -> (host start, launch time) */
static PyObject *Core_launch(CoreObject *self, PyObject *const *args, Py_ssize_t nargs) {
    StreamObject *s;
    long long stage1, stage2, host_start, launch;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "_launch(stream, stage1, stage2, name)");
        return NULL;
    }
    if (core_ready(self) < 0 || as_stream(args[0], &s) < 0 || as_ll(args[1], &stage1) < 0 ||
        as_ll(args[2], &stage2) < 0)
        return NULL;
    if (core_launch(self, s, stage1, stage2, &host_start, &launch) < 0) return NULL;
    return Py_BuildValue("(LL)", host_start, launch);
}

/* _place(stream, launch, duration, demand, not_before) -> (start, end, wait) */
static PyObject *Core_place(CoreObject *self, PyObject *const *args, Py_ssize_t nargs) {
    StreamObject *s;
    long long launch, duration, not_before, out[3];
    Demand d;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_place(stream, launch, duration, demand, not_before)");
        return NULL;
    }
    if (core_ready(self) < 0 || as_stream(args[0], &s) < 0 || as_ll(args[1], &launch) < 0 ||
        as_ll(args[2], &duration) < 0 || demand_parse(args[3], &d) < 0 ||
        as_ll(args[4], &not_before) < 0)
        return NULL;
    if (core_place(self, s, launch, duration, &d, not_before, out) < 0) return NULL;
    return Py_BuildValue("(LLL)", out[0], out[1], out[2]);
}

/* _earliest(ready, duration, demand) -> start */
static PyObject *Core_earliest(CoreObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long ready, duration;
    Demand d;
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_earliest(ready, duration, demand)");
        return NULL;
    }
    if (as_ll(args[0], &ready) < 0 || as_ll(args[1], &duration) < 0 ||
        demand_parse(args[2], &d) < 0)
        return NULL;
    const long long start = core_earliest(&d, ready, duration);
    if (start == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLongLong(start);
}

static PyObject *Core_block_until(CoreObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long t, stream_id = -1;
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "_block_until(t, name, stream_id=-1)");
        return NULL;
    }
    if (as_ll(args[0], &t) < 0 || (nargs == 3 && as_ll(args[2], &stream_id) < 0)) return NULL;
    if (core_block(self, t, args[1], stream_id) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Core_check(CoreObject *self, PyObject *stream) {
    if (core_ready(self) < 0 || core_check(self, stream) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Core_prune(CoreObject *self, PyObject *unused) {
    (void)unused;
    if (core_ready(self) < 0) return NULL;
    core_prune(self);
    Py_RETURN_NONE;
}

static PyObject *Core_new_task_id(CoreObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromLongLong(core_new_task_id(self));
}

/* launch_kernel(stream, cost, name, op_type, tensors=(), attrs=None): the adapter's per-op
   launch. The host pays stage 1 and 2, the task is placed, and only when the bus has
   subscribers does Python build the records (_emit_kernel) -- unless the one subscriber offers
   a RowSink (the bus's `direct`): then its rows are written here (rows_core.c). */
static PyObject *Core_launch_kernel(CoreObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames) {
    PyObject *tensors = NULL, *attrs = Py_None;
    if (nargs < 4 || nargs > 6) {
        PyErr_SetString(PyExc_TypeError,
                        "launch_kernel(stream, cost, name, op_type, tensors=..., attrs=None)");
        return NULL;
    }
    if (nargs > 4) tensors = args[4];
    if (nargs > 5) attrs = args[5];
    if (kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, i);
            if (PyUnicode_CompareWithASCIIString(key, "tensors") == 0)
                tensors = args[nargs + i];
            else if (PyUnicode_CompareWithASCIIString(key, "attrs") == 0)
                attrs = args[nargs + i];
            else {
                PyErr_Format(PyExc_TypeError, "launch_kernel() got an unexpected keyword %R",
                             key);
                return NULL;
            }
        }
    }
    StreamObject *s;
    if (core_ready(self) < 0 || as_stream(args[0], &s) < 0) return NULL;
    PyObject *cost = args[1];
    long long duration, host_start, launch, placed[3];
    PyObject *task_type = PyObject_GetAttr(cost, s_task_type);
    if (task_type == NULL) return NULL;
    PyObject *block_dim = PyObject_GetAttr(cost, s_block_dim);
    if (block_dim == NULL) {
        Py_DECREF(task_type);
        return NULL;
    }
    PyObject *py_duration = PyObject_GetAttr(cost, s_duration_ns);
    PyObject *key = py_duration ? PyTuple_Pack(2, task_type, block_dim) : NULL;
    PyObject *demand = NULL;
    if (key != NULL) {
        demand = PyDict_GetItemWithError(self->demands, key);
        if (demand != NULL)
            Py_INCREF(demand);
        else if (!PyErr_Occurred())
            demand = PyObject_CallMethodObjArgs((PyObject *)self, s_demand, task_type,
                                                block_dim, NULL);
    }
    Py_XDECREF(key);
    Py_DECREF(task_type);
    Py_DECREF(block_dim);
    if (demand == NULL || as_ll(py_duration, &duration) < 0) {
        Py_XDECREF(py_duration);
        Py_XDECREF(demand);
        return NULL;
    }
    Py_DECREF(py_duration);
    Demand d;
    const int parsed = demand_parse(demand, &d);
    Py_DECREF(demand); /* the pools stay alive in self->pools */
    if (parsed < 0) return NULL;
    if (core_launch(self, s, self->stage1_ns, self->stage2_ns, &host_start, &launch) < 0)
        return NULL;
    if (core_place(self, s, launch, duration, &d, 0, placed) < 0) return NULL;
    const long long task_id = core_new_task_id(self);
    PyObject *bus = PyObject_GetAttr((PyObject *)self, s_bus);
    if (bus == NULL) return NULL;
    PyObject *direct = bus_sink(bus);
    if (direct != NULL) {
        /* the recorder is the one subscriber: its rows, written here (no record objects) */
        Py_DECREF(bus);
        const int written = sink_kernel(direct, host_start, self->host_ns, s->stream_id, task_id,
                                        launch, placed[0], placed[1], placed[2], cost, args[2],
                                        args[3], tensors != NULL ? tensors : Py_None, attrs);
        Py_DECREF(direct);
        if (written < 0) return NULL;
        Py_RETURN_NONE;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(bus);
        return NULL;
    }
    PyObject *active_obj = PyObject_GetAttr(bus, s_active);
    Py_DECREF(bus);
    if (active_obj == NULL) return NULL;
    const int active = PyObject_IsTrue(active_obj);
    Py_DECREF(active_obj);
    if (active < 0) return NULL;
    if (!active) Py_RETURN_NONE;
    PyObject *numbers =
        Py_BuildValue("(LLLLLL)", host_start, launch, placed[0], placed[1], placed[2], task_id);
    if (numbers == NULL) return NULL;
    PyObject *res = PyObject_CallMethodObjArgs(
        (PyObject *)self, s_emit_kernel, (PyObject *)s, cost, args[2], args[3],
        tensors != NULL ? tensors : Py_None, attrs, numbers, NULL);
    Py_DECREF(numbers);
    return res;
}

static PyObject *Core_queued(CoreObject *self, void *closure) {
    (void)closure;
    return ring_list(&self->queued);
}

static PyMethodDef Core_methods[] = {
    {"_core_setup", (PyCFunction)Core_setup, METH_VARARGS,
     "_core_setup(stage1, stage2, stream_depth, task_queue, task_queue_depth, sync_ns, streams, "
     "pools, demands, device_error): configure the core and reset its clocks."},
    {"_launch", (PyCFunction)(void (*)(void))Core_launch, METH_FASTCALL,
     "Pay the host cost of submitting to a stream; (host start, launch time)."},
    {"_place", (PyCFunction)(void (*)(void))Core_place, METH_FASTCALL,
     "Find the start of a task and book its resources; (start, end, wait)."},
    {"_earliest", (PyCFunction)(void (*)(void))Core_earliest, METH_FASTCALL,
     "First start >= ready at which every pool of the demand has its units free."},
    {"_block_until", (PyCFunction)(void (*)(void))Core_block_until, METH_FASTCALL,
     "Block the host until device time t, then pay the cost of returning."},
    {"_check", (PyCFunction)Core_check, METH_O, "Raise unless the stream is live on this engine."},
    {"_prune", (PyCFunction)Core_prune, METH_NOARGS, "Forget pool timelines before the horizon."},
    {"_new_task_id", (PyCFunction)Core_new_task_id, METH_NOARGS, "The next task id."},
    {"launch_kernel", (PyCFunction)(void (*)(void))Core_launch_kernel,
     METH_FASTCALL | METH_KEYWORDS,
     "Launch a costed kernel without returning its task (records only when subscribed)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Core_members[] = {
    {"host_ns", T_LONGLONG, offsetof(CoreObject, host_ns), 0,
     "the host thread's clock (ns since the device's time origin)"},
    {"_stage2_free_ns", T_LONGLONG, offsetof(CoreObject, stage2_free_ns), 0, NULL},
    {"_next_task_id", T_LONGLONG, offsetof(CoreObject, next_task_id), 0, NULL},
    {"tasks_submitted", T_LONGLONG, offsetof(CoreObject, tasks_submitted), 0, NULL},
    {"_since_prune", T_LONGLONG, offsetof(CoreObject, since_prune), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Core_getset[] = {
    {"_queued_launches", (getter)Core_queued, NULL,
     "launch times of calls still waiting in the task queue (a copy)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprof_device_core.EngineCore",
    .tp_basicsize = sizeof(CoreObject),
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The engine's host clock, task queue and task placing (subclassed by Engine).",
    .tp_traverse = (traverseproc)Core_traverse,
    .tp_clear = (inquiry)Core_clear,
    .tp_methods = Core_methods,
    .tp_members = Core_members,
    .tp_getset = Core_getset,
    .tp_new = PyType_GenericNew,
};

/* ---- HostClock ----------------------------------------------------------------------------- */

/* The engine's host clock as a callable (Engine.host_clock): calling it gives host_ns now.
   The recorder and the caching allocator call it per record; compiled code reads the core's
   host_ns through it without a call (read_host_clock). */
typedef struct {
    PyObject_HEAD
    CoreObject *core;
    vectorcallfunc vectorcall;
} HostClockObject;

static PyTypeObject HostClockType;

int read_host_clock(PyObject *clock, long long *out);

static PyObject *HostClock_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames) {
    (void)args;
    if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "a host clock takes no arguments");
        return NULL;
    }
    long long now;
    return read_host_clock(self, &now) < 0 ? NULL : PyLong_FromLongLong(now);
}

static PyObject *HostClock_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"core", NULL};
    PyObject *core;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!:HostClock", names, &CoreType, &core))
        return NULL;
    HostClockObject *self = (HostClockObject *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->core = (CoreObject *)Py_NewRef(core);
        self->vectorcall = HostClock_vectorcall;
    }
    return (PyObject *)self;
}

static int HostClock_traverse(HostClockObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->core);
    return 0;
}

static int HostClock_clear(HostClockObject *self) {
    Py_CLEAR(self->core);
    return 0;
}

static void HostClock_dealloc(HostClockObject *self) {
    PyObject_GC_UnTrack(self);
    HostClock_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject HostClockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "msprof_device_core.HostClock",
    .tp_basicsize = sizeof(HostClockObject),
    .tp_dealloc = (destructor)HostClock_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "HostClock(core): a callable giving the core's host_ns now.",
    .tp_traverse = (traverseproc)HostClock_traverse,
    .tp_clear = (inquiry)HostClock_clear,
    .tp_vectorcall_offset = offsetof(HostClockObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = HostClock_new,
};

/* The time `clock` gives now: a HostClock's core's host_ns read directly, any other callable
   called (an int). 0, or -1 with an error set. */
int read_host_clock(PyObject *clock, long long *out) {
    if (Py_IS_TYPE(clock, &HostClockType)) {
        HostClockObject *host = (HostClockObject *)clock;
        if (host->core == NULL) {
            PyErr_SetString(PyExc_ValueError, "HostClock: its engine is gone");
            return -1;
        }
        *out = host->core->host_ns;
        return 0;
    }
    PyObject *now = PyObject_CallNoArgs(clock);
    if (now == NULL) return -1;
    *out = PyLong_AsLongLong(now);
    Py_DECREF(now);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* ---- the module ---------------------------------------------------------------------------- */

static PyObject *abi_version(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyLong_FromLong(ABI_VERSION);
}

PyObject *set_backward_thread(PyObject *m, PyObject *arg); /* rows_core.c */

static PyMethodDef module_methods[] = {
    {"abi_version", abi_version, METH_NOARGS, "The contract version of this module."},
    {"set_backward_thread", set_backward_thread, METH_O,
     "The ident of the thread running a backward now (0: none): its rows go under ident + 1."},
    {NULL, NULL, 0, NULL},
};

int add_allocator_types(PyObject *m); /* allocator_core.c */
int add_row_types(PyObject *m);       /* rows_core.c */

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "msprof_device_core",
    "The compiled scheduling core of msprof-py's simulated NPU engine.", -1, module_methods,
};

PyMODINIT_FUNC PyInit_msprof_device_core(void) {
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&s_bus, "bus"},
        {&s_active, "active"},
        {&s_task_type, "task_type"},
        {&s_block_dim, "block_dim"},
        {&s_duration_ns, "duration_ns"},
        {&s_on_block, "_on_block"},
        {&s_demand, "_demand"},
        {&s_emit_kernel, "_emit_kernel"},
        {&s_stream_full, "stream queue full"},
        {&s_queue_full, "task queue full"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    if (PyType_Ready(&PoolType) < 0 || PyType_Ready(&StreamType) < 0 ||
        PyType_Ready(&CoreType) < 0 || PyType_Ready(&HostClockType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Pool", (PyObject *)&PoolType) < 0 ||
        PyModule_AddObjectRef(m, "Stream", (PyObject *)&StreamType) < 0 ||
        PyModule_AddObjectRef(m, "EngineCore", (PyObject *)&CoreType) < 0 ||
        PyModule_AddObjectRef(m, "HostClock", (PyObject *)&HostClockType) < 0 ||
        add_allocator_types(m) < 0 || add_row_types(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
