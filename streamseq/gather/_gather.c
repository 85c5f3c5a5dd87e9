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
#include <errno.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
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

/* Guard this thread's copy: the handler installed while any thread copies.  0, or the
 * errno of a failed sigaction (without the GIL). */
static int
guard_nogil(void)
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
            failed = errno;
        else if (!is_ours(&found)) {  /* (ours left installed: its previous stays) */
            previous = found;
            if (sigaction(SIGBUS, &ours, NULL) != 0)
                failed = errno;
        }
    }
    if (!failed)
        copiers++;
    pthread_mutex_unlock(&guard_lock);
    return failed;
}

/* :func:`guard_nogil` with the GIL: -1 and an OSError when it failed. */
static int
guard(void)
{
    int failed = guard_nogil();
    if (failed) {
        errno = failed;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
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

/* One fill's rows: where they come from and where they go. */
typedef struct {
    npy_intp rows, t, step_bytes;
    char *out;
    npy_bool *res, *val;
    npy_int64 *sid, *pos;
    const npy_int64 *a, *n, *id;
    PyObject **held;    /* the stream of each row that reads (a reference), else NULL */
    PyObject *keep[5];  /* in a Copy: data, reset, valid, stream, step (references) */
} Rows;

/* Write row ``r`` of ``w``: its steps, zeros after them, its metadata. */
static void
copy_row(Rows *w, npy_intp r)
{
    npy_intp t = w->t, step_bytes = w->step_bytes, count = (npy_intp)w->n[r];
    const npy_int64 first = w->a[r], which = w->id[r];
    char *row = w->out + r * t * step_bytes;
    if (count) {
        const char *src = PyArray_DATA((PyArrayObject *)w->held[r]);
        memmove(row, src + (npy_intp)first * step_bytes, count * step_bytes);
    }
    memset(row + count * step_bytes, 0, (t - count) * step_bytes);
    w->res[r] = first == 0;
    memset(w->val + r * t, 1, count);
    memset(w->val + r * t + count, 0, t - count);
    npy_int64 *s = w->sid + r * t, *p = w->pos + r * t;
    for (npy_intp j = 0; j < count; j++) {
        s[j] = which;
        p[j] = first + j;
    }
    for (npy_intp j = count; j < t; j++) {
        s[j] = -1;
        p[j] = -1;
    }
}

/* Write every row of ``w``; -1, or the row whose copy faulted (SIGBUS).  Runs without
 * the GIL, under the guard. */
static npy_intp
copy_rows(Rows *w)
{
    sigjmp_buf jump;
    volatile npy_intp at = -1;  /* the row being written (where a SIGBUS was) */
    if (sigsetjmp(jump, 0) != 0) {
        copying = NULL;
        return at;
    }
    copying = &jump;
    for (npy_intp r = 0; r < w->rows; r++) {
        at = r;
        copy_row(w, r);
    }
    copying = NULL;
    return -1;
}

/* The error of row ``r`` of ``w``, whose copy faulted (a SourceError, or an OSError). */
static void
set_fault(Rows *w, npy_intp r)
{
    if (r >= 0 && w->held[r] != NULL)
        set_cut_short(w->held[r], w->id[r], w->a[r], w->n[r]);
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_OSError, "fill: SIGBUS while a batch was written (a memory "
                        "map cut short)");
}

/* Let go of what ``w`` holds (with the GIL). */
static void
release_rows(Rows *w, int owned)
{
    for (npy_intp r = 0; r < w->rows; r++)
        Py_XDECREF(w->held[r]);
    PyMem_Free(w->held);
    w->held = NULL;
    for (int k = 0; k < 5; k++)
        Py_CLEAR(w->keep[k]);
    if (owned)
        PyMem_Free((void *)w->a);  /* (n and id follow a in one block) */
    w->rows = 0;
}

/* ---- Copy: the rows of a batch, written by the copying thread and by its waiter ----
 *
 * A started Copy is queued for the one copying thread of the process, which takes its
 * rows one at a time; the thread that waits for it takes rows too (from the same
 * counter, the GIL released), so a batch asked for before its copy is done is written
 * by two cores.  A fork waits until neither the thread nor any waiter is writing rows:
 * the child's waiters write every row of its copies that no one took.  A Copy is done
 * when every row taken is written: wait() returns then, and nothing of the copying
 * thread touches it after. */

enum { COPY_OPEN, COPY_STARTED, COPY_DONE };

typedef struct CopyObject {
    PyObject_HEAD
    Rows *fills;
    Py_ssize_t count, cap;
    int state;                /* COPY_* */
    Py_ssize_t units;         /* the rows of all fills */
    Py_ssize_t taken;         /* rows taken (atomic) */
    Py_ssize_t fault;         /* the first row (of all fills) whose copy faulted, or -1 */
    int guard_errno;          /* the guard could not be installed (errno), or 0 */
    struct CopyObject *next;  /* in the queue */
} CopyObject;

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_work = PTHREAD_COND_INITIALIZER;  /* a copy was queued */
static pthread_cond_t q_done = PTHREAD_COND_INITIALIZER;  /* the thread left a copy */
static CopyObject *q_head, *q_tail;
static CopyObject *q_current;  /* the copy the thread takes rows of */
static int q_takers;           /* waiters taking rows (a fork waits until none does) */
static int q_started;          /* the thread runs (in this process) */

#define IDLE_S 1  /* a thread with nothing to copy for a second ends */

#define SPIN_NS 100000  /* the idle thread looks for a copy (a waiter for the thread's
                        * last row) for 0.1 ms before sleeping */

static long long
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Write rows of ``job`` until none is left to take (without the GIL). */
static void
take_rows(CopyObject *job)
{
    int err = guard_nogil();
    if (err) {
        __atomic_store_n(&job->guard_errno, err, __ATOMIC_RELAXED);
        return;
    }
    sigjmp_buf jump;
    volatile Py_ssize_t u = -1;
    volatile Py_ssize_t f = 0, base = 0;  /* the fill of row u, and its first row */
    if (sigsetjmp(jump, 0) != 0) {
        copying = NULL;
        Py_ssize_t none = -1;
        __atomic_compare_exchange_n(&job->fault, &none, u, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
        goto next;  /* (the other rows are still written: they may be the caller's) */
    }
    for (;;) {
        copying = &jump;
        u = __atomic_fetch_add(&job->taken, 1, __ATOMIC_RELAXED);
        if (u >= job->units)
            break;
        while (u >= base + job->fills[f].rows) {
            base += job->fills[f].rows;
            f++;
        }
        copy_row(&job->fills[f], u - base);
        copying = NULL;
    next:;
    }
    copying = NULL;
    unguard();
}

static void *
copier(void *unused)
{
    (void)unused;
    sigset_t all;  /* signals go to Python's threads; faults of this one stay its own */
    sigfillset(&all);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&q_lock);
    for (;;) {
        if (q_head == NULL) {  /* the next batch comes soon when batches are read in a loop */
            pthread_mutex_unlock(&q_lock);
            long long until = now_ns() + SPIN_NS;
            while (__atomic_load_n(&q_head, __ATOMIC_ACQUIRE) == NULL && now_ns() < until)
                ;
            pthread_mutex_lock(&q_lock);
        }
        if (q_head == NULL) {  /* idle for IDLE_S: the thread ends (started again when needed) */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += IDLE_S;
            while (q_head == NULL)
                if (pthread_cond_timedwait(&q_work, &q_lock, &until) == ETIMEDOUT &&
                    q_head == NULL) {
                    q_started = 0;
                    pthread_mutex_unlock(&q_lock);
                    return NULL;
                }
        }
        CopyObject *job = q_head;
        __atomic_store_n(&q_head, job->next, __ATOMIC_RELEASE);
        if (q_head == NULL)
            q_tail = NULL;
        job->next = NULL;
        q_current = job;
        pthread_mutex_unlock(&q_lock);
        take_rows(job);
        pthread_mutex_lock(&q_lock);
        __atomic_store_n(&q_current, NULL, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&q_done);
    }
    return NULL;
}

/* Take ``job`` out of the queue, and wait until the thread has left it (``q_lock`` held). */
static void
unqueue(CopyObject *job)
{
    CopyObject **at = &q_head, *before = NULL;
    while (*at != NULL && *at != job) {
        before = *at;
        at = &(*at)->next;
    }
    if (*at == job) {
        *at = job->next;
        if (q_tail == job)
            q_tail = before;
        job->next = NULL;
    }
    while (q_current == job)
        pthread_cond_wait(&q_done, &q_lock);
}

/* Write the rows of ``job`` left, then wait for the thread's (without the GIL). */
static void
finish(CopyObject *job)
{
    pthread_mutex_lock(&q_lock);  /* (a fork waits for the rows this thread takes) */
    q_takers++;
    pthread_mutex_unlock(&q_lock);
    take_rows(job);
    pthread_mutex_lock(&q_lock);
    if (--q_takers == 0)
        pthread_cond_broadcast(&q_done);
    pthread_mutex_unlock(&q_lock);
    long long until = now_ns() + SPIN_NS;  /* (the thread's last row: a row's copy at most) */
    while (__atomic_load_n(&q_current, __ATOMIC_ACQUIRE) == job && now_ns() < until)
        ;
    pthread_mutex_lock(&q_lock);
    unqueue(job);
    pthread_mutex_unlock(&q_lock);
    job->state = COPY_DONE;
}

/* Before a fork: the thread's copy ends first (the child has no copying thread), and
 * so do the rows that waiters took (a waiter of another thread is not in the child: a
 * row it took there would never be written, and the child's wait would not know). */
static void
copies_before_fork(void)
{
    pthread_mutex_lock(&q_lock);
    while (q_current != NULL || q_takers > 0)
        pthread_cond_wait(&q_done, &q_lock);
}

static void
copies_after_fork_parent(void)
{
    pthread_mutex_unlock(&q_lock);
}

/* A forked child has no copying thread: what was queued is written by its waiters. */
static void
copies_in_child(void)
{
    pthread_mutex_init(&q_lock, NULL);
    pthread_cond_init(&q_work, NULL);
    pthread_cond_init(&q_done, NULL);
    for (CopyObject *job = q_head, *next; job != NULL; job = next) {
        next = job->next;
        job->next = NULL;
    }
    q_head = q_tail = q_current = NULL;
    q_started = 0;
    q_takers = 0;
}

static void
release_copy(CopyObject *job)
{
    for (Py_ssize_t f = 0; f < job->count; f++)
        release_rows(&job->fills[f], 1);
    PyMem_Free(job->fills);
    job->fills = NULL;
    job->count = job->cap = job->units = 0;
}

static PyObject *
copy_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Copy", kwlist))
        return NULL;
    CopyObject *job = (CopyObject *)type->tp_alloc(type, 0);
    if (job == NULL)
        return NULL;
    job->state = COPY_OPEN;
    job->fault = -1;
    return (PyObject *)job;
}

static void
copy_dealloc(CopyObject *job)
{
    if (job->state == COPY_STARTED) {
        Py_BEGIN_ALLOW_THREADS  /* its rows are written into arrays it holds: end them */
        finish(job);
        Py_END_ALLOW_THREADS
    }
    release_copy(job);
    Py_TYPE(job)->tp_free((PyObject *)job);
}

/* Take the rows of a fill into ``job`` (written once it is started). */
static int
copy_take(CopyObject *job, Rows *w)
{
    if (job->count == job->cap) {
        Py_ssize_t cap = job->cap ? 2 * job->cap : 4;
        Rows *grown = PyMem_Realloc(job->fills, cap * sizeof(Rows));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        job->fills = grown;
        job->cap = cap;
    }
    npy_int64 *own = PyMem_Malloc(3 * w->rows * sizeof(npy_int64) + 1);
    if (own == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(own, w->a, w->rows * sizeof(npy_int64));
    memcpy(own + w->rows, w->n, w->rows * sizeof(npy_int64));
    memcpy(own + 2 * w->rows, w->id, w->rows * sizeof(npy_int64));
    Rows *kept = &job->fills[job->count++];
    *kept = *w;
    kept->a = own;
    kept->n = own + w->rows;
    kept->id = own + 2 * w->rows;
    for (int k = 0; k < 5; k++)
        Py_XINCREF(kept->keep[k]);
    job->units += w->rows;
    w->held = NULL;  /* (now the job's) */
    return 0;
}

static PyObject *
copy_start(CopyObject *job, PyObject *unused)
{
    if (job->state != COPY_OPEN) {
        PyErr_SetString(PyExc_RuntimeError, "Copy.start: started already");
        return NULL;
    }
    if (job->units == 0) {
        job->state = COPY_DONE;
        Py_RETURN_NONE;
    }
    pthread_mutex_lock(&q_lock);
    if (!q_started) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int err = pthread_create(&thread, &attr, copier, NULL);
        pthread_attr_destroy(&attr);
        if (err == 0)
            q_started = 1;  /* (else its waiter writes every row) */
    }
    job->state = COPY_STARTED;
    job->next = NULL;
    if (q_started) {
        if (q_tail != NULL)
            q_tail->next = job;
        else
            __atomic_store_n(&q_head, job, __ATOMIC_RELEASE);
        q_tail = job;
        pthread_cond_signal(&q_work);
    }
    pthread_mutex_unlock(&q_lock);
    Py_RETURN_NONE;
}

static PyObject *
copy_wait(CopyObject *job, PyObject *unused)
{
    if (job->state == COPY_OPEN) {
        PyErr_SetString(PyExc_RuntimeError, "Copy.wait: not started");
        return NULL;
    }
    if (job->state == COPY_STARTED) {
        Py_BEGIN_ALLOW_THREADS
        finish(job);
        Py_END_ALLOW_THREADS
    }
    PyObject *result = Py_None;
    if (job->guard_errno) {
        errno = job->guard_errno;
        PyErr_SetFromErrno(PyExc_OSError);
        result = NULL;
    } else if (job->fault >= 0) {
        Py_ssize_t f = 0, u = job->fault;
        while (u >= job->fills[f].rows)
            u -= job->fills[f++].rows;
        set_fault(&job->fills[f], u);
        result = NULL;
    }
    release_copy(job);
    job->guard_errno = 0;
    job->fault = -1;
    Py_XINCREF(result);
    return result;
}

static PyMethodDef copy_methods[] = {
    {"start", (PyCFunction)copy_start, METH_NOARGS,
     "start()\n\nHand the copies taken by fill to the copying thread (one a process)."},
    {"wait", (PyCFunction)copy_wait, METH_NOARGS,
     "wait()\n\nWait until they are done; raise the error of a copy that faulted."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CopyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "streamseq.gather._gather.Copy",
    .tp_basicsize = sizeof(CopyObject),
    .tp_dealloc = (destructor)copy_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Copy()\n\nThe copies of fill(..., copy): done by one thread of the process "
              "after start(), while the caller goes on; wait() ends them.",
    .tp_methods = copy_methods,
    .tp_new = copy_new,
};


/* ---- block(): memory kept mapped between batches ----
 *
 * A batch's array, new every batch (a batch its user holds never changes), costs page
 * faults where the allocator gives the memory back to the system between batches (large
 * blocks: a fault a page, 100 a 3 MiB batch).  Here the memory of an array whose every
 * view is gone is kept (up to POOL_SLOTS blocks, POOL_BYTES in all) for the next array of
 * the same size; to keep one, the blocks kept longest go (freed) as needed, so sizes no
 * longer made (another loader's batches) never keep out the sizes made now.  An array
 * over a Block (numpy.frombuffer) holds it: no view outlives it. */

#define POOL_SLOTS 8
#define POOL_BYTES (64 << 20)

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t size;
} BlockObject;

static struct { char *data; Py_ssize_t size; unsigned long long at; } pool[POOL_SLOTS];
static Py_ssize_t pool_bytes;
static unsigned long long pool_clock;  /* when each block was kept (its ``at``) */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

/* The slot of the block kept longest (``pool_lock`` held; some slot holds one). */
static int
pool_oldest(void)
{
    int oldest = -1;
    for (int k = 0; k < POOL_SLOTS; k++)
        if (pool[k].data != NULL && (oldest < 0 || pool[k].at < pool[oldest].at))
            oldest = k;
    return oldest;
}

static void
block_dealloc(BlockObject *b)
{
    char *data = b->data;
    char *gone[POOL_SLOTS];  /* the blocks that make room for it: freed after the lock */
    int n_gone = 0;
    pthread_mutex_lock(&pool_lock);
    if (b->size <= POOL_BYTES) {
        int free_slot = -1;
        for (;;) {
            for (int k = 0; k < POOL_SLOTS && free_slot < 0; k++)
                if (pool[k].data == NULL)
                    free_slot = k;
            if (free_slot >= 0 && pool_bytes + b->size <= POOL_BYTES)
                break;
            int k = pool_oldest();
            gone[n_gone++] = pool[k].data;
            pool_bytes -= pool[k].size;
            pool[k].data = NULL;
        }
        pool[free_slot].data = data;
        pool[free_slot].size = b->size;
        pool[free_slot].at = ++pool_clock;
        pool_bytes += b->size;
        data = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    free(data);
    for (int k = 0; k < n_gone; k++)
        free(gone[k]);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static PyObject *
kept(PyObject *self, PyObject *unused)
{
    Py_ssize_t sizes[POOL_SLOTS];
    unsigned long long at[POOL_SLOTS];
    int n = 0;
    pthread_mutex_lock(&pool_lock);
    for (int k = 0; k < POOL_SLOTS; k++)
        if (pool[k].data != NULL) {  /* (in the order they were kept: insertion) */
            int j = n++;
            for (; j > 0 && at[j - 1] > pool[k].at; j--) {
                at[j] = at[j - 1];
                sizes[j] = sizes[j - 1];
            }
            at[j] = pool[k].at;
            sizes[j] = pool[k].size;
        }
    pthread_mutex_unlock(&pool_lock);
    PyObject *list = PyList_New(n);
    for (int k = 0; list != NULL && k < n; k++) {
        PyObject *size = PyLong_FromSsize_t(sizes[k]);
        if (size == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, k, size);
    }
    return list;
}

static int
block_getbuffer(BlockObject *b, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)b, b->data, b->size, 0, flags);
}

static PyBufferProcs block_as_buffer = {(getbufferproc)block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "streamseq.gather._gather.Block",
    .tp_basicsize = sizeof(BlockObject),
    .tp_dealloc = (destructor)block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory of block(): kept for the next block of its size once nothing uses it.",
};

static void
pool_in_child(void)
{
    pthread_mutex_init(&pool_lock, NULL);
}

static PyObject *
block(PyObject *self, PyObject *args)
{
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "n", &size))
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "block: a negative size");
        return NULL;
    }
    char *data = NULL;
    pthread_mutex_lock(&pool_lock);
    for (int k = 0; k < POOL_SLOTS; k++)
        if (pool[k].data != NULL && pool[k].size == size) {
            data = pool[k].data;
            pool[k].data = NULL;
            pool_bytes -= size;
            break;
        }
    pthread_mutex_unlock(&pool_lock);
    if (data == NULL) {
        void *got = NULL;
        if (posix_memalign(&got, 64, size ? size : 1) != 0)
            return PyErr_NoMemory();
        data = got;
    }
    BlockObject *b = PyObject_New(BlockObject, &BlockType);
    if (b == NULL) {
        free(data);
        return NULL;
    }
    b->data = data;
    b->size = size;
    return (PyObject *)b;
}

static PyObject *
fill(PyObject *self, PyObject *args)
{
    PyObject *streams, *o_starts, *o_counts, *o_ids, *o_data, *o_reset, *o_valid, *o_stream,
        *o_step, *o_job = Py_None;
    if (!PyArg_ParseTuple(args, "O!OOOOOOOO|O", &PyList_Type, &streams, &o_starts, &o_counts,
                          &o_ids, &o_data, &o_reset, &o_valid, &o_stream, &o_step, &o_job))
        return NULL;
    if (o_job != Py_None && !PyObject_TypeCheck(o_job, &CopyType)) {
        PyErr_SetString(PyExc_TypeError, "fill: copy must be a Copy or None");
        return NULL;
    }
    CopyObject *job = o_job == Py_None ? NULL : (CopyObject *)o_job;
    if (job != NULL && job->state != COPY_OPEN) {
        PyErr_SetString(PyExc_RuntimeError, "fill: the Copy was started already");
        return NULL;
    }
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
    Rows w;
    memset(&w, 0, sizeof w);
    w.held = PyMem_Malloc(rows * sizeof(PyObject *) + 1);
    if (w.held == NULL)
        return PyErr_NoMemory();
    w.rows = rows;
    w.t = t;
    for (npy_intp r = 0; r < rows; r++) {
        w.held[r] = n[r] ? PyList_GET_ITEM(streams, r) : NULL;
        Py_XINCREF(w.held[r]);  /* alive while the GIL is released */
    }
    w.step_bytes = PyArray_ITEMSIZE(data);
    for (int k = 2; k < PyArray_NDIM(data); k++)
        w.step_bytes *= PyArray_DIM(data, k);
    w.out = PyArray_DATA(data);
    w.res = PyArray_DATA(reset);
    w.val = PyArray_DATA(valid);
    w.sid = PyArray_DATA(stream);
    w.pos = PyArray_DATA(step);
    w.a = a;
    w.n = n;
    w.id = id;
    if (job != NULL) {  /* copied by the job's thread, once started */
        w.keep[0] = o_data;
        w.keep[1] = o_reset;
        w.keep[2] = o_valid;
        w.keep[3] = o_stream;
        w.keep[4] = o_step;
        if (copy_take(job, &w) < 0) {
            memset(w.keep, 0, sizeof w.keep);
            release_rows(&w, 0);
            return NULL;
        }
        return PyLong_FromLong(-1);
    }
    if (guard() < 0) {
        release_rows(&w, 0);
        return NULL;
    }
    npy_intp faulted;
    Py_BEGIN_ALLOW_THREADS
    faulted = copy_rows(&w);
    unguard();
    Py_END_ALLOW_THREADS
    if (faulted >= 0)
        set_fault(&w, faulted);
    release_rows(&w, 0);
    return faulted >= 0 ? NULL : PyLong_FromLong(-1);
}

static PyMethodDef methods[] = {
    {"fill", fill, METH_VARARGS,
     "fill(streams, starts, counts, ids, data, reset, valid, stream, step, copy=None) -> int\n\n"
     "Write one batch from array streams; -1, or the first row that must take the "
     "general path (nothing written then; 0 when the data holds object references). "
     "With a Copy, the rows are written by its thread once it is started."},
    {"kept", kept, METH_NOARGS,
     "kept() -> list of int\n\n"
     "The sizes of the blocks kept for the next block of their size, kept longest first."},
    {"block", block, METH_VARARGS,
     "block(size) -> Block\n\n"
     "``size`` bytes (a writable buffer) kept, once nothing uses them, for the next block "
     "of that size (no page faults a batch)."},
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
    if (PyType_Ready(&CopyType) < 0 || PyType_Ready(&BlockType) < 0) {
        Py_DECREF(memmap_type);
        return NULL;
    }
    if (pthread_atfork(copies_before_fork, copies_after_fork_parent, copies_in_child) != 0 ||
        pthread_atfork(NULL, NULL, guard_in_child) != 0 ||
        pthread_atfork(NULL, NULL, pool_in_child) != 0) {
        Py_DECREF(memmap_type);
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&CopyType);
    if (PyModule_AddObject(m, "Copy", (PyObject *)&CopyType) < 0) {
        Py_DECREF(&CopyType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
