/* Batch assembly for array streams in one compiled pass.
 *
 * fill(streams, starts, counts, ids, data, reset, valid, stream, step) writes one batch:
 * row r copies counts[r] steps of streams[r] from step starts[r] into data[r] (zeros
 * after them), and writes its metadata: reset[r] = starts[r] == 0, valid[r] = the first
 * counts[r] steps, stream[r] = ids[r] there and -1 after, step[r] = starts[r] + j there
 * and -1 after.  A slice loop in Python costs ~100 ns a row before numpy copies anything;
 * here a row costs its memcpy.
 *
 * Nothing is written unless every row can be copied as raw memory: the data holds no
 * object references, and the stream of every row that reads is exactly an ndarray or a
 * memmap (a subclass may read differently through its __getitem__) of an equivalent
 * dtype (same byte order), C-contiguous, with the output's step shape and enough steps.
 * Otherwise fill returns the first row that cannot (0 when the data is at fault), and
 * the caller takes its general path (which converts, checks and raises the errors that
 * name the stream).  It returns -1 when the batch was written.  The copies run without
 * the GIL, holding a reference to every stream they read.
 *
 * A memory map whose file is cut short (truncate) while its pages are copied raises
 * SIGBUS, which would kill the process.  The copies are guarded: while any thread copies,
 * a SIGBUS handler is installed (by the first thread to start copying, the action it
 * found kept; put back by the last to end, unless another was installed meanwhile), which
 * jumps out of the copy of the thread that faulted (a thread-local jump buffer, set only
 * while it copies), and fill raises a streamseq.errors.SourceError naming the file, the
 * stream and its steps.  Installed for each copy, the guard holds whatever handlers a
 * program or a library (faulthandler) installs or removes between batches.  A SIGBUS of
 * any other code, or of another thread, does what the action found did (that handler, or
 * the default: the process ends).  The guard costs two sigaction calls a batch.
 */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <numpy/arrayobject.h>

static PyTypeObject *memmap_type;  /* numpy.memmap */

/* Where the copy of this thread jumps on SIGBUS; NULL while it copies nothing.  Of the
 * initial-exec model: read by the handler without an allocation. */
static __thread sigjmp_buf *volatile copying __attribute__((tls_model("initial-exec")));
static struct sigaction previous;  /* what SIGBUS did before the guard */
static int copiers;                /* threads copying under the guard */
static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;

static void
on_bus(int sig, siginfo_t *info, void *context)
{
    sigjmp_buf *jump = copying;
    if (jump != NULL) {
        copying = NULL;
        siglongjmp(*jump, 1);
    }
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, info, context);
        return;
    }
    if (previous.sa_handler == SIG_IGN && info != NULL && info->si_code <= 0)
        return;  /* sent (kill), and ignored before */
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* the default action: the process ends (a fault ignored ends it too) */
    struct sigaction fallback;
    memset(&fallback, 0, sizeof fallback);
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(SIGBUS, &fallback, NULL);
    raise(sig);
}

static int
is_ours(const struct sigaction *action)
{
    return (action->sa_flags & SA_SIGINFO) && action->sa_sigaction == on_bus;
}

/* Guard this thread's copy: the handler installed while any thread copies. */
static int
guard(void)
{
    int failed = 0;
    pthread_mutex_lock(&guard_lock);
    if (copiers == 0) {
        struct sigaction ours, found;
        memset(&ours, 0, sizeof ours);
        ours.sa_sigaction = on_bus;
        ours.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
        sigemptyset(&ours.sa_mask);
        if (sigaction(SIGBUS, NULL, &found) != 0)
            failed = 1;
        else if (!is_ours(&found)) {  /* (ours left installed: its previous stays) */
            previous = found;
            failed = sigaction(SIGBUS, &ours, NULL) != 0;
        }
    }
    if (!failed)
        copiers++;
    pthread_mutex_unlock(&guard_lock);
    if (failed)
        PyErr_SetFromErrno(PyExc_OSError);
    return failed ? -1 : 0;
}

/* The end of a guarded copy: the last one puts back the action found (if still ours). */
static void
unguard(void)
{
    pthread_mutex_lock(&guard_lock);
    if (--copiers == 0) {
        struct sigaction now;
        if (sigaction(SIGBUS, NULL, &now) == 0 && is_ours(&now))
            sigaction(SIGBUS, &previous, NULL);
    }
    pthread_mutex_unlock(&guard_lock);
}

/* A forked child has no thread copying: a fresh lock, and the action found put back. */
static void
guard_in_child(void)
{
    pthread_mutex_init(&guard_lock, NULL);
    if (copiers) {
        struct sigaction now;
        copiers = 0;
        if (sigaction(SIGBUS, NULL, &now) == 0 && is_ours(&now))
            sigaction(SIGBUS, &previous, NULL);
    }
}

/* The error of a copy from ``array`` (row ``id``'s steps start:start + count) that
 * faulted: a SourceError naming the file it maps, the stream and the steps. */
static void
set_cut_short(PyObject *array, npy_int64 id, npy_int64 start, npy_int64 count)
{
    PyObject *errors = NULL, *cls = NULL, *ref = NULL, *describe = NULL, *name = NULL,
             *path = NULL, *error = NULL, *done = NULL;
    PyObject *file = array;
    Py_INCREF(file);
    while (file != NULL && file != Py_None) {  /* the memmap (or a view's base) */
        path = PyObject_GetAttrString(file, "filename");
        if (path == NULL)
            PyErr_Clear();
        if (path != NULL && path != Py_None)
            break;
        Py_CLEAR(path);
        PyObject *base = PyArray_Check(file) ? PyArray_BASE((PyArrayObject *)file) : NULL;
        Py_XINCREF(base);
        Py_DECREF(file);
        file = base;
    }
    Py_XDECREF(file);
    if (path == NULL)
        path = PyUnicode_FromString("<a memory map>");
    errors = PyImport_ImportModule("streamseq.errors");
    ref = PyImport_ImportModule("streamseq.read.ref");
    if (path == NULL || errors == NULL || ref == NULL)
        goto end;
    cls = PyObject_GetAttrString(errors, "SourceError");
    describe = PyObject_GetAttrString(ref, "describe");
    if (cls == NULL || describe == NULL)
        goto end;
    name = PyObject_CallOneArg(describe, array);
    error = PyObject_CallFunction(
        cls, "Os", path,
        "the file was cut short while steps were copied from its memory map (a read past "
        "its end: SIGBUS): they cannot be read; if it is a store's data file, run "
        "materialize to make the store again");
    if (name == NULL || error == NULL)
        goto end;
    done = PyObject_CallMethod(error, "locate", "LO(LL)", (long long)id, name,
                               (long long)start, (long long)(start + count));
    if (done != NULL)
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
end:
    Py_XDECREF(errors);
    Py_XDECREF(cls);
    Py_XDECREF(ref);
    Py_XDECREF(describe);
    Py_XDECREF(name);
    Py_XDECREF(path);
    Py_XDECREF(error);
    Py_XDECREF(done);
}

static int
as_array(PyObject *obj, int type, int ndim, const char *name, PyArrayObject **out)
{
    if (!PyArray_Check(obj) || PyArray_TYPE((PyArrayObject *)obj) != type ||
        PyArray_NDIM((PyArrayObject *)obj) != ndim ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)obj) ||
        !PyArray_ISNOTSWAPPED((PyArrayObject *)obj) ||
        !PyArray_ISWRITEABLE((PyArrayObject *)obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a writeable C-contiguous native array "
                     "of %d dimensions and type %d", name, ndim, type);
        return -1;
    }
    *out = (PyArrayObject *)obj;
    return 0;
}

/* Whether row stream ``obj`` can be read as raw memory into ``data``, a steps apart
 * from ``start`` for ``count`` steps. */
static int
readable(PyObject *obj, PyArrayObject *data, npy_int64 start, npy_int64 count)
{
    if (Py_TYPE(obj) != &PyArray_Type && Py_TYPE(obj) != memmap_type)
        return 0;
    PyArrayObject *a = (PyArrayObject *)obj;
    PyArray_Descr *d = PyArray_DESCR(a);
    int nd = PyArray_NDIM(a);
    if (nd != PyArray_NDIM(data) - 1 || !PyArray_IS_C_CONTIGUOUS(a) ||
        !PyArray_EquivTypes(d, PyArray_DESCR(data)) || PyDataType_REFCHK(d))
        return 0;
    npy_intp *shape = PyArray_DIMS(a), *want = PyArray_DIMS(data);
    for (int k = 1; k < nd; k++)
        if (shape[k] != want[k + 1])
            return 0;
    return start >= 0 && start <= (npy_int64)shape[0] - count;  /* (no overflow) */
}

static PyObject *
fill(PyObject *self, PyObject *args)
{
    PyObject *streams, *o_starts, *o_counts, *o_ids, *o_data, *o_reset, *o_valid, *o_stream,
        *o_step;
    if (!PyArg_ParseTuple(args, "O!OOOOOOOO", &PyList_Type, &streams, &o_starts, &o_counts,
                          &o_ids, &o_data, &o_reset, &o_valid, &o_stream, &o_step))
        return NULL;
    PyArrayObject *starts, *counts, *ids, *data, *reset, *valid, *stream, *step;
    if (as_array(o_starts, NPY_INT64, 1, "starts", &starts) ||
        as_array(o_counts, NPY_INT64, 1, "counts", &counts) ||
        as_array(o_ids, NPY_INT64, 1, "ids", &ids) ||
        as_array(o_reset, NPY_BOOL, 1, "reset", &reset) ||
        as_array(o_valid, NPY_BOOL, 2, "valid", &valid) ||
        as_array(o_stream, NPY_INT64, 2, "stream", &stream) ||
        as_array(o_step, NPY_INT64, 2, "step", &step))
        return NULL;
    if (!PyArray_Check(o_data) || PyArray_NDIM((PyArrayObject *)o_data) < 2 ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)o_data) ||
        !PyArray_ISWRITEABLE((PyArrayObject *)o_data)) {
        PyErr_SetString(PyExc_TypeError, "data: expected a writeable C-contiguous array");
        return NULL;
    }
    data = (PyArrayObject *)o_data;
    npy_intp rows = PyArray_DIM(data, 0), t = PyArray_DIM(data, 1);
    if (PyList_GET_SIZE(streams) != rows || PyArray_DIM(starts, 0) != rows ||
        PyArray_DIM(counts, 0) != rows || PyArray_DIM(ids, 0) != rows ||
        PyArray_DIM(reset, 0) != rows || PyArray_DIM(valid, 0) != rows ||
        PyArray_DIM(valid, 1) != t || PyArray_DIM(stream, 0) != rows ||
        PyArray_DIM(stream, 1) != t || PyArray_DIM(step, 0) != rows ||
        PyArray_DIM(step, 1) != t) {
        PyErr_SetString(PyExc_ValueError, "fill: shapes differ from the data's [rows, steps]");
        return NULL;
    }
    const npy_int64 *a = PyArray_DATA(starts), *n = PyArray_DATA(counts),
                    *id = PyArray_DATA(ids);
    if (PyDataType_REFCHK(PyArray_DESCR(data)))
        return PyLong_FromLong(0);  /* zeros of objects are not zero bytes */
    for (npy_intp r = 0; r < rows; r++) {
        if (n[r] < 0 || n[r] > t)
            return PyLong_FromSsize_t(r);
        if (n[r] && !readable(PyList_GET_ITEM(streams, r), data, a[r], n[r]))
            return PyLong_FromSsize_t(r);
    }
    PyObject **held = PyMem_Malloc(rows * sizeof(PyObject *) + 1);
    if (held == NULL)
        return PyErr_NoMemory();
    if (guard() < 0) {
        PyMem_Free(held);
        return NULL;
    }
    for (npy_intp r = 0; r < rows; r++) {
        held[r] = n[r] ? PyList_GET_ITEM(streams, r) : NULL;
        Py_XINCREF(held[r]);  /* alive while the GIL is released */
    }
    npy_intp step_bytes = PyArray_ITEMSIZE(data);
    for (int k = 2; k < PyArray_NDIM(data); k++)
        step_bytes *= PyArray_DIM(data, k);
    char *out = PyArray_DATA(data);
    npy_bool *res = PyArray_DATA(reset), *val = PyArray_DATA(valid);
    npy_int64 *sid = PyArray_DATA(stream), *pos = PyArray_DATA(step);
    sigjmp_buf jump;
    volatile npy_intp at = -1;  /* the row being written (where a SIGBUS was) */
    int faulted = 0;
    Py_BEGIN_ALLOW_THREADS
    if (sigsetjmp(jump, 0) != 0) {
        faulted = 1;
        goto copied;
    }
    copying = &jump;
    for (npy_intp r = 0; r < rows; r++) {
        at = r;
        npy_intp count = (npy_intp)n[r];
        char *row = out + r * t * step_bytes;
        if (count) {
            const char *src = PyArray_DATA((PyArrayObject *)held[r]);
            memmove(row, src + (npy_intp)a[r] * step_bytes, count * step_bytes);
        }
        memset(row + count * step_bytes, 0, (t - count) * step_bytes);
        res[r] = a[r] == 0;
        memset(val + r * t, 1, count);
        memset(val + r * t + count, 0, t - count);
        npy_int64 *s = sid + r * t, *p = pos + r * t, first = a[r], which = id[r];
        for (npy_intp j = 0; j < count; j++) {
            s[j] = which;
            p[j] = first + j;
        }
        for (npy_intp j = count; j < t; j++) {
            s[j] = -1;
            p[j] = -1;
        }
    }
copied:
    copying = NULL;
    unguard();
    Py_END_ALLOW_THREADS
    if (faulted) {
        npy_intp r = at;
        if (r >= 0 && held[r] != NULL)
            set_cut_short(held[r], id[r], a[r], n[r]);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_OSError, "fill: SIGBUS while a batch was written (a memory "
                            "map cut short)");
    }
    for (npy_intp r = 0; r < rows; r++)
        Py_XDECREF(held[r]);
    PyMem_Free(held);
    return faulted ? NULL : PyLong_FromLong(-1);
}

static PyMethodDef methods[] = {
    {"fill", fill, METH_VARARGS,
     "fill(streams, starts, counts, ids, data, reset, valid, stream, step) -> int\n\n"
     "Write one batch from array streams; -1, or the first row that must take the "
     "general path (nothing written then; 0 when the data holds object references)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_gather", "Batch assembly for array streams, compiled.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__gather(void)
{
    import_array();
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return NULL;
    memmap_type = (PyTypeObject *)PyObject_GetAttrString(numpy, "memmap");
    Py_DECREF(numpy);
    if (memmap_type == NULL)
        return NULL;
    if (!PyType_Check(memmap_type)) {
        Py_DECREF(memmap_type);
        PyErr_SetString(PyExc_TypeError, "numpy.memmap is not a type");
        return NULL;
    }
    if (pthread_atfork(NULL, NULL, guard_in_child) != 0) {
        Py_DECREF(memmap_type);
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return NULL;
    }
    return PyModule_Create(&module);
}
