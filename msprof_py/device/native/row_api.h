/* The host-op calls of the recorder's compiled row sink (rows_core.c), for other compiled code.
 *
 * The adapter's compiled per-op path (msprof_py/adapter/native/hot_path.cpp) opens and closes a
 * host op per ATen op it runs. Through Python that is two method calls on the sink, two calls
 * of the host clock and a tuple of the op's fields; through these it is three C calls. The
 * module msprof_device_core offers the table as the capsule `row_api`
 * (MSPROF_ROW_API_NAME); a caller checks `version` before using it.
 *
 * Plain C and the CPython API only: no torch (device/ never depends on it).
 */
#ifndef MSPROF_ROW_API_H
#define MSPROF_ROW_API_H

#include <Python.h>

#define MSPROF_ROW_API_NAME "msprof_device_core.row_api"
#define MSPROF_ROW_API_VERSION 1

typedef struct {
    int version; /* MSPROF_ROW_API_VERSION */
    /* Whether `obj` is a row sink these calls can write through (a RowSink given its
       recorder's host clock). */
    int (*usable)(PyObject *obj);
    /* Whether host-op rows are recorded now (the recorder's step is in its window). */
    int (*ops_on)(PyObject *sink);
    /* A host op opens now: its start is the sink's host clock now, its thread the calling
       thread's `thread` column value, its stack column empty; it takes the next event id and
       is the parent of what it launches until op_end. -1 with a Python error set on failure. */
    int (*op_begin)(PyObject *sink, PyObject *name, PyObject *shapes, PyObject *dtypes,
                    PyObject *module, long long sequence, PyObject *module_path);
    /* The open host op returned now: its host_events row (nothing when none is open). -1 with
       a Python error set on failure. */
    int (*op_end)(PyObject *sink);
    /* No host op is open (the step is not recorded). */
    void (*op_close)(PyObject *sink);
} MsprofRowApi;

#endif
