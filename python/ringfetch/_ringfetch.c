/*
 * python/ringfetch/_ringfetch.c — the CPython extension behind the `ringfetch` package (docs/python.md).
 *
 * A thin layer over the public C API (<ringfetch.h>), in CPython's limited API 3.11 (one abi3 binary for
 * every CPython >= 3.11). What it adds to the C contract is only what Python needs:
 *  - the GIL is released wherever the library may wait or copy (rf_pipeline_run, acquires and hints
 *    that copy, evict, destroy, file open and close), and taken again inside the compute trampoline,
 *    which runs on the calling thread;
 *  - a busy mark per pipeline, set and tested under the GIL, so that two Python threads can never be
 *    inside the library on one pipeline at once (the C rule "one thread at a time"): the second gets
 *    rf.Busy;
 *  - the sources of keyed calls are kept alive (their buffers held) until no copy can read them: until
 *    evict(key), a run that emptied the cache, close, or a later keyed call that finds the key gone
 *    with no copy of it in flight — the C rule "src stays valid until evict";
 *  - Blocks are views of a slot that know when they stop being valid (after their compute returned,
 *    after release), count the buffer, DLPack and View views they handed out, and refuse to release or
 *    close while one is alive; a compute that returns with one alive stops the run, and no slot is
 *    refilled until it ends: no Python object ever reads a slot that was given back;
 *  - plain reads of an rf.File's buffer (its mapping) never die of SIGBUS when the file shrank: a SIGBUS
 *    handler of the package maps zeros over the faulting page (see "plain reads" below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <ringfetch.h>
#if defined(RF_HAVE_CUDA) && RF_HAVE_CUDA
#include <ringfetch/cuda.h>
#define RFPY_CUDA 1
#else
#define RFPY_CUDA 0
#endif

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

PyMODINIT_FUNC PyInit__ringfetch(void);

/* ---- errors ----------------------------------------------------------------------------------------- */

/* rf.Error and one subclass per RF_E* code, indexed by -code (index 0: rf.Error itself). */
#define RFPY_NCODES 13
static PyObject *rfpy_err[RFPY_NCODES];

static const struct {
	int code;
	const char *name; /* the Python class name */
	PyObject **builtin;
} rfpy_errdefs[] = {
	{RF_EINVAL, "InvalidArgument", &PyExc_ValueError},
	{RF_ENOMEM, "OutOfMemory", &PyExc_MemoryError},
	{RF_ENOSPC, "NoSpace", NULL},
	{RF_ENODEV, "NoDevice", NULL},
	{RF_ENOTSUP, "NotSupported", NULL},
	{RF_EBUSY, "Busy", NULL},
	{RF_ECANCELED, "Canceled", NULL},
	{RF_ECALLBACK, "CallbackError", NULL},
	{RF_EBACKEND, "BackendError", NULL},
	{RF_EHAZARD, "HazardError", NULL},
	{RF_ECONFIG, "ConfigError", NULL},
	{RF_EIO, "IOError", &PyExc_OSError},
};

/* Raise the class of `code` with `msg` as str(), and .code / .name on the instance. */
static PyObject *rfpy_raise_obj(int code, PyObject *msg)
{
	PyObject *cls = code < 0 && -code < RFPY_NCODES && rfpy_err[-code] ? rfpy_err[-code] : rfpy_err[0];
	PyObject *exc = msg ? PyObject_CallFunctionObjArgs(cls, msg, NULL) : NULL;
	Py_XDECREF(msg);
	if (exc == NULL)
		return NULL;
	PyObject *c = PyLong_FromLong(code);
	PyObject *n = PyUnicode_FromString(rf_err_name(code));
	if (c == NULL || n == NULL || PyObject_SetAttrString(exc, "code", c) < 0 ||
	    PyObject_SetAttrString(exc, "name", n) < 0) {
		Py_XDECREF(c);
		Py_XDECREF(n);
		Py_DECREF(exc);
		return NULL;
	}
	Py_DECREF(c);
	Py_DECREF(n);
	PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
	Py_DECREF(exc);
	return NULL;
}

/* Raise for a failed rf_ call: its code, and rf_errmsg()'s sentence (this thread's, so the call must have
 * been made on this thread, which it always is: releasing the GIL does not change threads). */
static PyObject *rfpy_raise(int code)
{
	const char *m = rf_errmsg();
	return rfpy_raise_obj(code, PyUnicode_FromString(m && *m ? m : rf_strerror(code)));
}

/* Raise the class of `code` with a message of our own (checks made before calling the library). */
static PyObject *rfpy_raisef(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
	va_end(ap);
	return rfpy_raise_obj(code, msg);
}

/* The type name of o, for TypeError messages ("?" if it cannot be had). */
static PyObject *rfpy_tname(PyObject *o)
{
	PyObject *n = PyType_GetName(Py_TYPE(o));
	if (n == NULL) {
		PyErr_Clear();
		n = PyUnicode_FromString("?");
	}
	return n;
}

static PyObject *rfpy_type_error(const char *what, const char *want, PyObject *o)
{
	PyObject *n = rfpy_tname(o);
	if (n == NULL)
		return NULL;
	PyErr_Format(PyExc_TypeError, "%s must be %s, not '%U'", what, want, n);
	Py_DECREF(n);
	return NULL;
}

/* An int argument in [0, max]: TypeError for a non-int, rf.InvalidArgument for a value out of range. */
static int rfpy_uint(PyObject *o, const char *what, unsigned long long max, unsigned long long *out)
{
	if (PyLong_CheckExact(o)) {
		unsigned long long v = PyLong_AsUnsignedLongLong(o);
		if (!(v == (unsigned long long)-1 && PyErr_Occurred()) && v <= max) {
			*out = v;
			return 0;
		}
		PyErr_Clear();
	}
	/* Anything with __index__ (numpy integers too) is an int here. */
	if (!PyLong_Check(o) && !PyIndex_Check(o)) {
		rfpy_type_error(what, "an int", o);
		return -1;
	}
	PyObject *i = PyNumber_Index(o);
	if (i == NULL)
		return -1;
	unsigned long long v = PyLong_AsUnsignedLongLong(i);
	Py_DECREF(i);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		if (!PyErr_ExceptionMatches(PyExc_OverflowError))
			return -1;
		PyErr_Clear();
		rfpy_raisef(RF_EINVAL, "%s must be in 0 .. %llu, got %R", what, max, o);
		return -1;
	}
	if (v > max) {
		rfpy_raisef(RF_EINVAL, "%s must be in 0 .. %llu, got %R", what, max, o);
		return -1;
	}
	*out = v;
	return 0;
}

/* None or a str, as a C string borrowed from o (valid while o lives). */
static int rfpy_optstr(PyObject *o, const char *what, const char **out)
{
	if (o == Py_None) {
		*out = NULL;
		return 0;
	}
	if (!PyUnicode_Check(o)) {
		rfpy_type_error(what, "a str or None", o);
		return -1;
	}
	/* The library reads a C string: a NUL inside would cut the value short ("cpu\0x" taken for
	 * "cpu"), and a str with no UTF-8 form (a lone surrogate) names no value either. */
	Py_ssize_t n = 0;
	*out = PyUnicode_AsUTF8AndSize(o, &n);
	if (*out == NULL) {
		if (!PyErr_ExceptionMatches(PyExc_UnicodeError))
			return -1;
		PyErr_Clear();
		rfpy_raisef(RF_EINVAL, "%s %R is not valid UTF-8 text", what, o);
		return -1;
	}
	if (strlen(*out) != (size_t)n) {
		rfpy_raisef(RF_EINVAL, "%s %R holds a NUL character", what, o);
		return -1;
	}
	return 0;
}

/* A source: any object with the buffer protocol whose bytes are contiguous (C or Fortran order: either
 * way one range of bytes). The buffer is held until rfpy_src_release. */
static int rfpy_src_get(PyObject *o, Py_buffer *view, const char *what, Py_ssize_t index)
{
	if (!PyObject_CheckBuffer(o)) {
		PyObject *n = rfpy_tname(o);
		if (n == NULL)
			return -1;
		if (index >= 0)
			PyErr_Format(PyExc_TypeError, "%s %zd must be a bytes-like object (the buffer protocol), not '%U'",
				     what, index, n);
		else
			PyErr_Format(PyExc_TypeError, "%s must be a bytes-like object (the buffer protocol), not '%U'",
				     what, n);
		Py_DECREF(n);
		return -1;
	}
	if (PyObject_GetBuffer(o, view, PyBUF_ANY_CONTIGUOUS) < 0) {
		if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_ValueError))
			return -1;
		PyObject *t, *v, *tb;
		PyErr_Fetch(&t, &v, &tb);
		if (index >= 0)
			rfpy_raisef(RF_EINVAL, "%s %zd: its bytes are not one contiguous range (%S)", what, index, v);
		else
			rfpy_raisef(RF_EINVAL, "%s: its bytes are not one contiguous range (%S)", what, v);
		Py_XDECREF(t);
		Py_XDECREF(v);
		Py_XDECREF(tb);
		return -1;
	}
	return 0;
}

/* ---- DLPack (the ABI of dlpack.h 1.0, mirrored: the header is a spec, not a library) ---------------- */

typedef struct {
	int32_t device_type;
	int32_t device_id;
} rfpy_DLDevice;
typedef struct {
	uint8_t code;
	uint8_t bits;
	uint16_t lanes;
} rfpy_DLDataType;
typedef struct {
	void *data;
	rfpy_DLDevice device;
	int32_t ndim;
	rfpy_DLDataType dtype;
	int64_t *shape;
	int64_t *strides;
	uint64_t byte_offset;
} rfpy_DLTensor;
typedef struct rfpy_DLManagedTensor {
	rfpy_DLTensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct rfpy_DLManagedTensor *self);
} rfpy_DLManagedTensor;
typedef struct {
	uint32_t major, minor;
} rfpy_DLPackVersion;
typedef struct rfpy_DLManagedTensorVersioned {
	rfpy_DLPackVersion version;
	void *manager_ctx;
	void (*deleter)(struct rfpy_DLManagedTensorVersioned *self);
	uint64_t flags;
	rfpy_DLTensor dl_tensor;
} rfpy_DLManagedTensorVersioned;
enum { RFPY_kDLCPU = 1, RFPY_kDLCUDA = 2 };
/* DLDataTypeCode (dlpack.h 1.1: the float8 kinds are 10 .. 14) */
enum {
	RFPY_kDLInt = 0,
	RFPY_kDLUInt = 1,
	RFPY_kDLFloat = 2,
	RFPY_kDLBfloat = 4,
	RFPY_kDLComplex = 5,
	RFPY_kDLBool = 6,
	RFPY_kDLFloat8_e4m3fn = 10,
	RFPY_kDLFloat8_e4m3fnuz = 11,
	RFPY_kDLFloat8_e5m2 = 12,
	RFPY_kDLFloat8_e5m2fnuz = 13,
	RFPY_kDLFloat8_e8m0fnu = 14,
};
#define RFPY_DLPACK_FLAG_READ_ONLY 1ull

/* ---- types ------------------------------------------------------------------------------------------- */

static PyTypeObject *Pipeline_Type, *Block_Type, *View_Type, *File_Type, *Pin_Type;

typedef struct PipelineObject {
	PyObject_HEAD
	rf_pipeline *p;          /* NULL once closed */
	int busy;                /* a thread is inside the library on p (read and written under the GIL) */
	int sweeping;            /* busy for File.close's sweep (pipes_sweep_all), not for a call of its own */
	unsigned long owner;     /* that thread's ident while busy */
	Py_ssize_t exports;      /* live buffer and DLPack views of its blocks */
	Py_ssize_t kept;         /* of those, views of a run's block that outlived its compute */
	size_t kept_index;       /* that block's index (the last one kept) */
	PyObject *pins;          /* dict: key -> Pin, the source of each key a copy may read */
	Py_ssize_t pins_sweep_at; /* sweep the pins of absent keys when there are that many (pins_sweep) */
	struct PipelineObject *next_pipe, *prev_pipe; /* every Pipeline alive (rfpy_pipes), under the GIL */
	int device;              /* params.device */
	int memory;              /* params.memory */
	int inline_copies;       /* backend "cpu": hints copy on the caller */
	PyObject *weakrefs;
} PipelineObject;

enum { BLOCK_RUN, BLOCK_HELD, BLOCK_DONE };

typedef struct {
	PyObject_HEAD
	PipelineObject *pipe; /* strong: the slot's memory lives as long as a Block of it */
	rf_block b;
	int state;
	int kept;           /* a run's block whose compute returned while views of it were alive */
	Py_ssize_t exports; /* live buffers, DLPack tensors and Views taken from it */
} BlockObject;

/* The element types of Block.view, named as safetensors names them. `fmt` is the buffer protocol's
 * (struct module) format; types it has no letter for (BF16, the float8 kinds) are exported to it as
 * unsigned integers of their width, their raw bits, while DLPack names them. */
static const struct rfpy_dtype {
	const char *name;
	const char *fmt;
	uint8_t code, bits;
} rfpy_dtypes[] = {
	{"F64", "d", RFPY_kDLFloat, 64},
	{"F32", "f", RFPY_kDLFloat, 32},
	{"F16", "e", RFPY_kDLFloat, 16},
	{"BF16", "H", RFPY_kDLBfloat, 16},
	{"I64", "q", RFPY_kDLInt, 64},
	{"I32", "i", RFPY_kDLInt, 32},
	{"I16", "h", RFPY_kDLInt, 16},
	{"I8", "b", RFPY_kDLInt, 8},
	{"U64", "Q", RFPY_kDLUInt, 64},
	{"U32", "I", RFPY_kDLUInt, 32},
	{"U16", "H", RFPY_kDLUInt, 16},
	{"U8", "B", RFPY_kDLUInt, 8},
	{"BOOL", "?", RFPY_kDLBool, 8},
	{"C64", "Zf", RFPY_kDLComplex, 64},
	{"F8_E4M3", "B", RFPY_kDLFloat8_e4m3fn, 8},
	{"F8_E4M3FNUZ", "B", RFPY_kDLFloat8_e4m3fnuz, 8},
	{"F8_E5M2", "B", RFPY_kDLFloat8_e5m2, 8},
	{"F8_E5M2FNUZ", "B", RFPY_kDLFloat8_e5m2fnuz, 8},
	{"F8_E8M0", "B", RFPY_kDLFloat8_e8m0fnu, 8},
};
#define RFPY_NDTYPES (sizeof rfpy_dtypes / sizeof rfpy_dtypes[0])
_Static_assert(sizeof(int) == 4 && sizeof(long long) == 8, "the buffer formats i/I and q/Q name 32 and 64 bits");

/* Block.view(dtype, shape, *, offset=0): a typed, C-contiguous window of a block's bytes. It counts as
 * one view of its block while it lives; the buffers and tensors taken from it keep it alive. */
typedef struct {
	PyObject_HEAD
	BlockObject *blk; /* strong; NULL once released */
	const struct rfpy_dtype *dt;
	Py_ssize_t exports; /* buffers and DLPack tensors taken from it */
	size_t offset, nbytes;
	int ndim;
	Py_ssize_t *shape; /* ndim extents, then ndim strides (NULL for ndim 0) */
} ViewObject;

typedef struct {
	PyObject_HEAD
	Py_buffer view; /* held: a keyed source's bytes */
} PinObject;

typedef struct {
	PyObject_HEAD
	rf_file *f; /* NULL once closed */
	Py_ssize_t exports;
	Py_ssize_t reads; /* pread calls reading it with the GIL released: close is rf.Busy meanwhile */
	PyObject *weakrefs;
} FileObject;

/* ---- the per-pipeline busy mark ----------------------------------------------------------------------------- */

static int pipe_open(PipelineObject *self, const char *who)
{
	if (self->p == NULL) {
		rfpy_raisef(RF_EINVAL, "%s: the pipeline is closed", who);
		return -1;
	}
	return 0;
}

/* Until another thread is no longer inside the library on self (only a File.close sweep, if sweep_only),
 * without the GIL: it needs the GIL back to finish. Polls, as long as one library call of that thread. */
static void pipe_wait_idle(PipelineObject *self, int sweep_only)
{
	while (self->busy && (!sweep_only || self->sweeping)) {
		Py_BEGIN_ALLOW_THREADS
		struct timespec d = {0, 20000};
		nanosleep(&d, NULL);
		Py_END_ALLOW_THREADS
	}
}

/* Enter the library on self->p from this thread, or raise rf.Busy: from a compute callback of its own run
 * (the library would answer RF_EBUSY too), or while another Python thread is inside it. */
static int pipe_enter(PipelineObject *self, const char *who)
{
	if (pipe_open(self, who) < 0)
		return -1;
	unsigned long me = PyThread_get_thread_ident();
	if (self->owner == me) {
		rfpy_raisef(RF_EBUSY, "%s: called from a compute callback of this pipeline's run", who);
		return -1;
	}
	/* File.close on another thread sweeping its pins (the GIL released while it evicts absent keys) is
	 * not a call of the user's: wait for it, a few evictions, rather than answer rf.Busy. */
	while (self->busy && self->sweeping && self->owner != me) {
		pipe_wait_idle(self, 1);
		if (pipe_open(self, who) < 0)
			return -1;
	}
	if (self->busy) {
		rfpy_raisef(RF_EBUSY, "%s: another thread is using this pipeline (a run or a keyed call)", who);
		return -1;
	}
	self->busy = 1;
	self->owner = me;
	return 0;
}

static void pipe_leave(PipelineObject *self)
{
	self->busy = 0;
	self->owner = 0;
}

/* Before anything that may write a slot (run, acquire, prefetch): a view of a run's block that outlived
 * its compute still reads that block's slot, and must never see another block's bytes there. */
static int pipe_kept_check(PipelineObject *self, const char *who)
{
	if (self->kept == 0)
		return 0;
	PyErr_Format(PyExc_BufferError,
		     "%s: %zd view(s) of block %zu of an earlier run outlived its compute, and no slot is refilled "
		     "while they live (drop them; a view kept by an exception's traceback counts too)",
		     who, self->kept, self->kept_index);
	return -1;
}

/* ---- Pin: a keyed source kept alive --------------------------------------------------------------------- */

static void Pin_dealloc(PinObject *self)
{
	PyTypeObject *tp = Py_TYPE((PyObject *)self);
	PyBuffer_Release(&self->view);
	PyObject_Free(self);
	Py_DECREF(tp);
}

static PyType_Slot Pin_slots[] = {
	{Py_tp_dealloc, Pin_dealloc},
	{0, NULL},
};
static PyType_Spec Pin_spec = {"ringfetch._Pin", sizeof(PinObject), 0,
				Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, Pin_slots};

/* A Pin taking over *view (which the caller must not release afterwards). */
static PyObject *pin_new(Py_buffer *view)
{
	PinObject *pin = PyObject_New(PinObject, Pin_Type);
	if (pin == NULL) {
		PyBuffer_Release(view);
		return NULL;
	}
	pin->view = *view;
	return (PyObject *)pin;
}

/*
 * Keyed calls name a source for `key`: decide what must be kept alive. The library may read a key's src
 * until evict(key), so the first src of a key is pinned; a later call naming the same bytes pins nothing
 * more; a call naming other bytes for a key that is resident is a hit (no src read: nothing to pin); for
 * an absent key the old source is let go only after evict(key) has returned (no copy reads it any more).
 * On return *newpin is the Pin to store once the call succeeded (NULL: none), and *src / *bytes what to
 * pass to the library. Called with the pipeline entered.
 */
static int pin_prepare(PipelineObject *self, PyObject *key_obj, uint64_t key, Py_buffer *view, PyObject **newpin)
{
	*newpin = NULL;
	PinObject *old = (PinObject *)PyDict_GetItemWithError(self->pins, key_obj);
	if (old == NULL && PyErr_Occurred())
		return -1;
	if (old != NULL && old->view.buf == view->buf && old->view.len == view->len)
		return 0;
	if (old != NULL) {
		rf_key_state st = RF_KEY_ABSENT;
		(void)rf_pipeline_lookup(self->p, key, &st, NULL);
		if (st != RF_KEY_ABSENT)
			return 0;
		int rc;
		Py_BEGIN_ALLOW_THREADS
		rc = rf_pipeline_evict(self->p, key);
		Py_END_ALLOW_THREADS
		if (rc != RF_OK) {
			rfpy_raise(rc);
			return -1;
		}
		if (PyDict_DelItem(self->pins, key_obj) < 0)
			return -1;
	}
	Py_buffer copy = *view;
	if (PyObject_GetBuffer(view->obj, &copy, PyBUF_ANY_CONTIGUOUS) < 0)
		return -1;
	*newpin = pin_new(&copy);
	return *newpin ? 0 : -1;
}

/*
 * Let go of the sources of keys that left the cache. lookup says a key is absent, but a hint's copy of it
 * may still be in flight (its slot was taken for another key meanwhile); evict(key) of an absent key
 * changes nothing and returns once no copy reads its source, so the sources are let go only after it.
 * Called after a run (which empties the cache) and, from keyed calls, whenever the pins have doubled
 * since the last sweep: each sweep costs O(pins) and leaves at most the resident keys' (the slots), so
 * keyed calls pay O(1) each, amortised, and a pipeline never pins more than about twice its slots' worth
 * of sources (plus RFPY_PINS_SLACK) however many distinct keys go through it. Any exception pending is
 * kept; a key whose evict fails keeps its source. Called with the pipeline entered.
 */
#define RFPY_PINS_SLACK 16

static void pins_sweep(PipelineObject *self)
{
	PyObject *et, *ev, *etb;
	PyErr_Fetch(&et, &ev, &etb);
	Py_ssize_t n = PyDict_Size(self->pins);
	PyObject **gone = n > 0 ? PyMem_Calloc((size_t)n, sizeof *gone) : NULL;
	uint64_t *keys = n > 0 ? PyMem_Calloc((size_t)n, sizeof *keys) : NULL;
	int *ok = n > 0 ? PyMem_Calloc((size_t)n, sizeof *ok) : NULL;
	Py_ssize_t ng = 0;
	if (n > 0 && gone != NULL && keys != NULL && ok != NULL) {
		Py_ssize_t pos = 0;
		PyObject *k, *v;
		while (PyDict_Next(self->pins, &pos, &k, &v)) {
			unsigned long long key = PyLong_AsUnsignedLongLong(k);
			rf_key_state st = RF_KEY_READY;
			if (!PyErr_Occurred())
				(void)rf_pipeline_lookup(self->p, (uint64_t)key, &st, NULL);
			PyErr_Clear();
			if (st == RF_KEY_ABSENT) {
				Py_INCREF(k);
				gone[ng] = k;
				keys[ng++] = (uint64_t)key;
			}
		}
		rf_pipeline *p = self->p;
		Py_BEGIN_ALLOW_THREADS
		for (Py_ssize_t i = 0; i < ng; i++)
			ok[i] = rf_pipeline_evict(p, keys[i]) == RF_OK;
		Py_END_ALLOW_THREADS
		for (Py_ssize_t i = 0; i < ng; i++) {
			if (ok[i] && PyDict_DelItem(self->pins, gone[i]) < 0)
				PyErr_Clear();
			Py_DECREF(gone[i]);
		}
	}
	PyMem_Free(gone);
	PyMem_Free(keys);
	PyMem_Free(ok);
	self->pins_sweep_at = 2 * PyDict_Size(self->pins) + RFPY_PINS_SLACK;
	PyErr_Clear();
	PyErr_Restore(et, ev, etb);
}

/* After a keyed call pinned a new source. */
static void pins_added(PipelineObject *self)
{
	if (PyDict_Size(self->pins) >= self->pins_sweep_at)
		pins_sweep(self);
}

/* Every Pipeline alive, linked under the GIL from creation to dealloc. */
static PipelineObject *rfpy_pipes;

/* Sweep every open pipeline that no thread is inside (File.close: a file whose keys all left the cache
 * closes at once, not at some later keyed call). A sweep releases the GIL: the pipeline being swept is
 * held (so linked), and the next one is read only after it. */
static void pipes_sweep_all(void)
{
	PipelineObject *q = rfpy_pipes;
	while (q != NULL) {
		if (q->p == NULL || q->busy || q->pins == NULL || PyDict_Size(q->pins) == 0) {
			q = q->next_pipe;
			continue;
		}
		Py_INCREF((PyObject *)q);
		q->busy = q->sweeping = 1;
		q->owner = PyThread_get_thread_ident();
		pins_sweep(q);
		q->sweeping = 0;
		pipe_leave(q);
		PipelineObject *next = q->next_pipe;
		Py_DECREF((PyObject *)q);
		q = next;
	}
}

/* ---- Block ------------------------------------------------------------------------------------------- */

/* Dead Blocks kept for reuse (under the GIL): allocation is a good part of an acquire's cost. */
#define BLOCK_FREE_MAX 16
static BlockObject *block_free[BLOCK_FREE_MAX];
static int block_nfree;

static PyObject *block_new(PipelineObject *pipe, const rf_block *b, int state)
{
	BlockObject *self;
	if (block_nfree > 0) {
		self = block_free[--block_nfree];
		PyObject_Init((PyObject *)self, Block_Type);
	} else {
		self = PyObject_GC_New(BlockObject, Block_Type);
		if (self == NULL)
			return NULL;
	}
	Py_INCREF((PyObject *)pipe);
	self->pipe = pipe;
	self->b = *b;
	self->state = state;
	self->kept = 0;
	self->exports = 0;
	PyObject_GC_Track(self);
	return (PyObject *)self;
}

static int block_valid(BlockObject *self, const char *who)
{
	if (self->state == BLOCK_DONE || self->pipe->p == NULL) {
		rfpy_raisef(RF_EINVAL, "%s: block %zu is no longer valid (its compute returned, it was released, or "
				       "its pipeline was closed)",
			    who, self->b.index);
		return -1;
	}
	return 0;
}

/*
 * The collector's view (a cycle through a held block's views, or through a source that refers to a
 * Block, is collected): a Block refers to its pipeline, a View to its block, a pipeline to every source
 * it pins. Only the pipeline breaks cycles (Pipeline_clear, which lets go of its sources once no copy
 * reads them): a Block or View never lets go of what it points into, so no object left in a cycle ever
 * points at freed slot memory.
 */
static int Block_traverse(BlockObject *self, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE((PyObject *)self));
	Py_VISIT((PyObject *)self->pipe);
	return 0;
}

static void block_dealloc(BlockObject *self)
{
	PyTypeObject *tp = Py_TYPE((PyObject *)self);
	PipelineObject *pipe = self->pipe;
	PyObject_GC_UnTrack(self);
	/* A held block dropped without release: release it here (a destructor never leaks a hold). Another
	 * thread may be inside the library on this pipeline: wait for it, without the GIL. This thread may
	 * be inside it too, between its rf_ calls: a keyed call or a sweep letting go of a pinned source
	 * that owned the block, or a collection run by one of its allocations. Python code runs on the
	 * entered thread only between its rf_ calls, or in a run's compute, where no block is held (a run
	 * does not start with one held, and keyed calls are refused during it): release at once. */
	if (self->state == BLOCK_HELD) {
		if (pipe->owner != PyThread_get_thread_ident())
			pipe_wait_idle(pipe, 0);
		/* Under the GIL from here to the end of the call: no other thread can enter. */
		if (pipe->p != NULL)
			(void)rf_pipeline_release(pipe->p, &self->b);
	}
	Py_DECREF((PyObject *)pipe);
	/* Keep a few for the next blocks: the serving loop makes one per acquire. */
	if (block_nfree < BLOCK_FREE_MAX) {
		block_free[block_nfree++] = self;
	} else {
		PyObject_GC_Del(self);
	}
	Py_DECREF(tp);
}

static PyObject *Block_index(BlockObject *self, void *c)
{
	(void)c;
	if (block_valid(self, "Block.index") < 0)
		return NULL;
	return PyLong_FromSize_t(self->b.index);
}

static PyObject *Block_slot(BlockObject *self, void *c)
{
	(void)c;
	if (block_valid(self, "Block.slot") < 0)
		return NULL;
	return PyLong_FromUnsignedLong(self->b.slot);
}

static PyObject *Block_nbytes(BlockObject *self, void *c)
{
	(void)c;
	if (block_valid(self, "Block.nbytes") < 0)
		return NULL;
	return PyLong_FromSize_t(self->b.bytes);
}

static PyObject *Block_stream(BlockObject *self, void *c)
{
	(void)c;
	if (block_valid(self, "Block.stream") < 0)
		return NULL;
	if (self->pipe->memory != RF_MEMORY_DEVICE)
		Py_RETURN_NONE;
	return PyLong_FromVoidPtr(self->b.stream);
}

static PyObject *Block_repr(BlockObject *self)
{
	if (self->state == BLOCK_DONE || self->pipe->p == NULL)
		return PyUnicode_FromFormat("<ringfetch.Block %zu (no longer valid)>", self->b.index);
	return PyUnicode_FromFormat("<ringfetch.Block index=%zu slot=%u nbytes=%zu%s>", self->b.index, self->b.slot,
				    self->b.bytes, self->state == BLOCK_HELD ? " held" : "");
}

/* ---- views of a block: buffers, DLPack tensors, View objects ----------------------------------------- */

/* Everything taken from a block that can read its slot counts: while one lives the block cannot be given
 * back (release, close), and a run's block whose compute returns with one alive stops the run and is
 * "kept": no slot of the pipeline is refilled until its last view ends (pipe_kept_check). */
static void blk_export_begin(BlockObject *b)
{
	b->exports++;
	b->pipe->exports++;
}

static void blk_export_end(BlockObject *b)
{
	b->exports--;
	b->pipe->exports--;
	if (b->kept)
		b->pipe->kept--;
}

/* The owner of a buffer or DLPack tensor: a Block, or a View (whose own life counts for its block). */
static void owner_export_begin(PyObject *o)
{
	if (Py_TYPE(o) == View_Type)
		((ViewObject *)o)->exports++;
	else
		blk_export_begin((BlockObject *)o);
}

static void owner_export_end(PyObject *o)
{
	if (Py_TYPE(o) == View_Type)
		((ViewObject *)o)->exports--;
	else
		blk_export_end((BlockObject *)o);
}

static int Block_getbuffer(BlockObject *self, Py_buffer *view, int flags)
{
	if (block_valid(self, "Block buffer") < 0)
		return -1;
	if (self->pipe->memory == RF_MEMORY_DEVICE) {
		PyErr_SetString(PyExc_BufferError,
				"the block is device memory: use DLPack (__dlpack__, e.g. torch.from_dlpack)");
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)self, (void *)self->b.data, (Py_ssize_t)self->b.bytes, 1, flags) < 0)
		return -1;
	blk_export_begin(self);
	return 0;
}

static void Block_releasebuffer(BlockObject *self, Py_buffer *view)
{
	(void)view;
	blk_export_end(self);
}

/* DLPack: the capsule's tensor keeps its owner (and so the slot) alive and counts as one of its views
 * until the consumer's deleter runs (any thread: it takes the GIL). */
static void dl_done(PyObject *owner)
{
	PyGILState_STATE g = PyGILState_Ensure();
	owner_export_end(owner);
	Py_DECREF(owner);
	PyGILState_Release(g);
}

static void dl_deleter(rfpy_DLManagedTensor *t)
{
	PyObject *owner = t->manager_ctx;
	free(t);
	dl_done(owner);
}

static void dl_deleter_v(rfpy_DLManagedTensorVersioned *t)
{
	PyObject *owner = t->manager_ctx;
	free(t);
	dl_done(owner);
}

static void dl_capsule_free(PyObject *cap)
{
	/* A consumer renames the capsule ("used_dltensor") when it takes the tensor over; one never consumed
	 * is freed here. Keep any exception being raised while we run the deleter. */
	PyObject *t, *v, *tb;
	PyErr_Fetch(&t, &v, &tb);
	if (PyCapsule_IsValid(cap, "dltensor")) {
		rfpy_DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
		if (m && m->deleter)
			m->deleter(m);
	} else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
		rfpy_DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
		if (m && m->deleter)
			m->deleter(m);
	}
	PyErr_Clear();
	PyErr_Restore(t, v, tb);
}

#if RFPY_CUDA
/* DLPack's stream argument on CUDA: None = the legacy default stream (1), 1 legacy default, 2 per-thread
 * default, -1 no synchronisation, anything else a cudaStream_t; 0 is disallowed by the protocol. */
static int dl_cuda_sync(BlockObject *self, PyObject *stream)
{
	cudaStream_t consumer;
	if (stream == Py_None) {
		consumer = cudaStreamLegacy;
	} else {
		long long s = PyLong_AsLongLong(stream);
		if (s == -1 && PyErr_Occurred())
			return -1;
		if (s == -1)
			return 0;
		if (s == 0) {
			rfpy_raisef(RF_EINVAL, "__dlpack__: stream 0 is ambiguous in DLPack (use 1 for the legacy default "
					       "stream, 2 for the per-thread default stream)");
			return -1;
		}
		consumer = s == 1 ? cudaStreamLegacy : s == 2 ? cudaStreamPerThread : (cudaStream_t)(intptr_t)s;
	}
	cudaStream_t producer = self->b.stream ? (cudaStream_t)self->b.stream : cudaStreamLegacy;
	if (consumer == producer)
		return 0;
	/* The consumer's stream waits, on the device, for the work ordered before now on the block's stream
	 * (its copy, and the compute enqueued so far). */
	int prev = 0, ok;
	cudaEvent_t ev = NULL;
	Py_BEGIN_ALLOW_THREADS
	ok = cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(self->pipe->device) == cudaSuccess &&
	     cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess &&
	     cudaEventRecord(ev, producer) == cudaSuccess && cudaStreamWaitEvent(consumer, ev, 0) == cudaSuccess;
	if (ev)
		cudaEventDestroy(ev);
	cudaSetDevice(prev);
	Py_END_ALLOW_THREADS
	if (!ok) {
		cudaError_t e = cudaGetLastError();
		rfpy_raisef(RF_EBACKEND, "__dlpack__: ordering stream %R after the block's stream failed: %s", stream,
			    cudaGetErrorString(e));
		return -1;
	}
	return 0;
}
#endif

/* What a DLPack export describes: the bytes at the block's slot + offset, as ndim extents of dtype
 * (row-major, strides NULL: compact). */
struct dl_what {
	rfpy_DLDataType dtype;
	uint64_t offset;
	int ndim;
	const Py_ssize_t *shape;
};

/* __dlpack__ of a Block or a View (owner) of block blk: the protocol's arguments checked, the consumer's
 * stream ordered (cuda), and a capsule whose tensor keeps owner alive and counts as its view. */
static PyObject *dl_export(PyObject *owner, BlockObject *blk, const struct dl_what *w, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
	PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$OOOO:__dlpack__", kwlist, &stream, &max_version, &dl_device,
					 &copy))
		return NULL;
	int dev_type = blk->pipe->memory == RF_MEMORY_DEVICE ? RFPY_kDLCUDA : RFPY_kDLCPU;
	int dev_id = dev_type == RFPY_kDLCUDA ? blk->pipe->device : 0;
	if (stream != Py_None && !PyLong_Check(stream))
		return rfpy_type_error("__dlpack__: stream", "an int or None", stream);
	if (copy != Py_None && PyObject_IsTrue(copy)) {
		PyErr_SetString(PyExc_BufferError, "__dlpack__: copy=True: a block is exported without copying only");
		return NULL;
	}
	if (dl_device != Py_None) {
		long t = -1, i = -1;
		if (!PyTuple_Check(dl_device) || PyTuple_Size(dl_device) != 2)
			return rfpy_type_error("__dlpack__: dl_device", "a (device_type, device_id) tuple", dl_device);
		t = PyLong_AsLong(PyTuple_GetItem(dl_device, 0));
		i = PyLong_AsLong(PyTuple_GetItem(dl_device, 1));
		if (PyErr_Occurred())
			return NULL;
		if (t != dev_type || i != dev_id) {
			PyErr_Format(PyExc_BufferError, "__dlpack__: the block lives on device (%d, %d), not (%ld, %ld)",
				     dev_type, dev_id, t, i);
			return NULL;
		}
	}
	if (dev_type == RFPY_kDLCPU) {
		/* Host memory: nothing to order. The protocol passes None for CPU; -1 means "no sync". */
		if (stream != Py_None) {
			long s = PyLong_AsLong(stream);
			if (s == -1 && PyErr_Occurred())
				return NULL;
			if (s != -1)
				return rfpy_raisef(RF_EINVAL, "__dlpack__: stream must be None for a host block, got %R",
						   stream);
		}
	} else {
#if RFPY_CUDA
		if (dl_cuda_sync(blk, stream) < 0)
			return NULL;
#endif
	}
	int versioned = 0;
	if (max_version != Py_None) {
		if (!PyTuple_Check(max_version) || PyTuple_Size(max_version) < 1)
			return rfpy_type_error("__dlpack__: max_version", "a (major, minor) tuple", max_version);
		long major = PyLong_AsLong(PyTuple_GetItem(max_version, 0));
		if (major == -1 && PyErr_Occurred())
			return NULL;
		versioned = major >= 1;
	}
	/* data points at the view itself, byte_offset 0: torch refuses any other byte_offset (and exports
	 * its own offset tensors that way). */
	rfpy_DLTensor t = {
		.data = (char *)blk->b.data + w->offset,
		.device = {dev_type, dev_id},
		.ndim = w->ndim,
		.dtype = w->dtype,
		.shape = NULL,
		.strides = NULL,
		.byte_offset = 0,
	};
	size_t extra = (size_t)(w->ndim > 0 ? w->ndim : 1) * sizeof(int64_t);
	void *mem;
	int64_t *shape;
	PyObject *cap;
	if (versioned) {
		rfpy_DLManagedTensorVersioned *m = calloc(1, sizeof *m + extra);
		if (m == NULL)
			return PyErr_NoMemory();
		m->version.major = 1;
		m->version.minor = 0;
		m->manager_ctx = owner;
		m->deleter = dl_deleter_v;
		m->flags = RFPY_DLPACK_FLAG_READ_ONLY;
		m->dl_tensor = t;
		shape = m->dl_tensor.shape = (int64_t *)(m + 1);
		mem = m;
		cap = PyCapsule_New(m, "dltensor_versioned", dl_capsule_free);
	} else {
		rfpy_DLManagedTensor *m = calloc(1, sizeof *m + extra);
		if (m == NULL)
			return PyErr_NoMemory();
		m->manager_ctx = owner;
		m->deleter = dl_deleter;
		m->dl_tensor = t;
		shape = m->dl_tensor.shape = (int64_t *)(m + 1);
		mem = m;
		cap = PyCapsule_New(m, "dltensor", dl_capsule_free);
	}
	if (cap == NULL) {
		free(mem);
		return NULL;
	}
	for (int d = 0; d < w->ndim; d++)
		shape[d] = (int64_t)w->shape[d];
	/* The tensor's reference and view count, given back by its deleter. */
	Py_INCREF(owner);
	owner_export_begin(owner);
	return cap;
}

static PyObject *dl_device(BlockObject *blk)
{
	if (blk->pipe->memory == RF_MEMORY_DEVICE)
		return Py_BuildValue("(ii)", RFPY_kDLCUDA, blk->pipe->device);
	return Py_BuildValue("(ii)", RFPY_kDLCPU, 0);
}

static PyObject *Block_dlpack(BlockObject *self, PyObject *args, PyObject *kwds)
{
	if (block_valid(self, "__dlpack__") < 0)
		return NULL;
	Py_ssize_t n = (Py_ssize_t)self->b.bytes;
	struct dl_what w = {{RFPY_kDLUInt, 8, 1}, 0, 1, &n};
	return dl_export((PyObject *)self, self, &w, args, kwds);
}

static PyObject *Block_dlpack_device(BlockObject *self, PyObject *unused)
{
	(void)unused;
	if (block_valid(self, "__dlpack_device__") < 0)
		return NULL;
	return dl_device(self);
}

/* ---- View: Block.view(dtype, shape, *, offset=0) -------------------------------------------------------- */

static const struct rfpy_dtype *dtype_arg(PyObject *o)
{
	if (!PyUnicode_Check(o)) {
		rfpy_type_error("view: dtype", "a str (\"F32\", \"BF16\", ...)", o);
		return NULL;
	}
	for (size_t i = 0; i < RFPY_NDTYPES; i++)
		if (PyUnicode_CompareWithASCIIString(o, rfpy_dtypes[i].name) == 0)
			return &rfpy_dtypes[i];
	rfpy_raisef(RF_EINVAL,
		    "view: unknown dtype %R (safetensors' names: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL "
		    "C64 F8_E4M3 F8_E4M3FNUZ F8_E5M2 F8_E5M2FNUZ F8_E8M0)",
		    o);
	return NULL;
}

/* shape: a tuple or list of ints (or one int, for 1-D) into v->ndim / v->shape, with the C-contiguous
 * strides after the extents; v->nbytes = their product x itemsize. */
static int shape_arg(ViewObject *v, PyObject *o)
{
	PyObject *seq;
	if (PyTuple_Check(o) || PyList_Check(o)) {
		seq = PySequence_Tuple(o);
	} else if (PyLong_Check(o) || PyIndex_Check(o)) {
		seq = PyTuple_Pack(1, o);
	} else {
		rfpy_type_error("view: shape", "a tuple of ints", o);
		return -1;
	}
	if (seq == NULL)
		return -1;
	Py_ssize_t nd = PyTuple_Size(seq);
	if (nd > PyBUF_MAX_NDIM) {
		Py_DECREF(seq);
		rfpy_raisef(RF_EINVAL, "view: shape has %zd dimensions, at most %d", nd, PyBUF_MAX_NDIM);
		return -1;
	}
	Py_ssize_t *sh = nd > 0 ? PyMem_Calloc((size_t)nd * 2, sizeof *sh) : NULL;
	if (nd > 0 && sh == NULL) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	/* n: the view's bytes; span: the same product with every 0 extent taken as 1, which the strides
	 * below reach, so it must fit a Py_ssize_t too even when n is 0 (numpy refuses such shapes). */
	size_t n = v->dt->bits / 8, span = n;
	int bad = 0;
	for (Py_ssize_t d = 0; !bad && d < nd; d++) {
		unsigned long long e;
		bad = rfpy_uint(PyTuple_GetItem(seq, d), "view: each extent of shape", PY_SSIZE_T_MAX, &e) < 0;
		if (!bad && (__builtin_mul_overflow(n, (size_t)e, &n) || n > (size_t)PY_SSIZE_T_MAX ||
			     __builtin_mul_overflow(span, e > 0 ? (size_t)e : 1u, &span) ||
			     span > (size_t)PY_SSIZE_T_MAX)) {
			rfpy_raisef(RF_EINVAL, "view: shape %R of %s is more bytes than memory holds", o, v->dt->name);
			bad = 1;
		}
		if (!bad)
			sh[d] = (Py_ssize_t)e;
	}
	Py_DECREF(seq);
	if (bad) {
		PyMem_Free(sh);
		return -1;
	}
	Py_ssize_t stride = v->dt->bits / 8;
	for (Py_ssize_t d = nd - 1; d >= 0; d--) {
		sh[nd + d] = stride;
		stride *= sh[d] > 0 ? sh[d] : 1;
	}
	v->ndim = (int)nd;
	v->shape = sh;
	v->nbytes = n;
	return 0;
}

static PyObject *Block_view(BlockObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"dtype", "shape", "offset", NULL};
	PyObject *dtype_o, *shape_o, *offset_o = NULL;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|$O:view", kwlist, &dtype_o, &shape_o, &offset_o))
		return NULL;
	if (block_valid(self, "view") < 0)
		return NULL;
	const struct rfpy_dtype *dt = dtype_arg(dtype_o);
	if (dt == NULL)
		return NULL;
	unsigned long long off = 0;
	if (offset_o != NULL && rfpy_uint(offset_o, "view: offset", SIZE_MAX, &off) < 0)
		return NULL;
	if (off % (dt->bits / 8) != 0)
		return rfpy_raisef(RF_EINVAL, "view: offset %llu is not a multiple of %s's %u bytes", off, dt->name,
				   dt->bits / 8u);
	ViewObject *v = PyObject_GC_New(ViewObject, View_Type);
	if (v == NULL)
		return NULL;
	v->blk = NULL;
	v->dt = dt;
	v->exports = 0;
	v->offset = (size_t)off;
	v->ndim = 0;
	v->shape = NULL;
	if (shape_arg(v, shape_o) < 0) {
		Py_DECREF((PyObject *)v);
		return NULL;
	}
	/* A prefix (or any window) of the block: what is past the view is not the view's. */
	if (v->offset > self->b.bytes || v->nbytes > self->b.bytes - v->offset) {
		rfpy_raisef(RF_EINVAL, "view: shape %R of %s is %zu bytes at offset %zu, past the block's %zu", shape_o,
			    dt->name, v->nbytes, v->offset, self->b.bytes);
		Py_DECREF((PyObject *)v);
		return NULL;
	}
	Py_INCREF((PyObject *)self);
	v->blk = self;
	blk_export_begin(self);
	PyObject_GC_Track(v);
	return (PyObject *)v;
}

static int view_valid(ViewObject *self, const char *who)
{
	if (self->blk == NULL) {
		rfpy_raisef(RF_EINVAL, "%s: the view was released", who);
		return -1;
	}
	return block_valid(self->blk, who);
}

/* Let go of the block (its view count) now. */
static void view_end(ViewObject *self)
{
	BlockObject *b = self->blk;
	if (b != NULL) {
		self->blk = NULL;
		blk_export_end(b);
		Py_DECREF((PyObject *)b);
	}
}

static int View_traverse(ViewObject *self, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE((PyObject *)self));
	Py_VISIT((PyObject *)self->blk);
	return 0;
}

static void View_dealloc(ViewObject *self)
{
	PyTypeObject *tp = Py_TYPE((PyObject *)self);
	PyObject_GC_UnTrack(self);
	view_end(self);
	PyMem_Free(self->shape);
	PyObject_GC_Del(self);
	Py_DECREF(tp);
}

static int View_getbuffer(ViewObject *self, Py_buffer *view, int flags)
{
	if (view_valid(self, "View buffer") < 0)
		return -1;
	BlockObject *b = self->blk;
	if (b->pipe->memory == RF_MEMORY_DEVICE) {
		PyErr_SetString(PyExc_BufferError,
				"the block is device memory: use DLPack (__dlpack__, e.g. torch.from_dlpack)");
		return -1;
	}
	char *buf = (char *)b->b.data + self->offset;
	if (PyBuffer_FillInfo(view, (PyObject *)self, buf, (Py_ssize_t)self->nbytes, 1, flags) < 0)
		return -1;
	/* Typed when the consumer takes a shape; a consumer that asks for bytes only (PyBUF_SIMPLE, as
	 * numpy.frombuffer does) gets the bytes. */
	if ((flags & PyBUF_ND) == PyBUF_ND) {
		view->ndim = self->ndim;
		view->itemsize = self->dt->bits / 8;
		view->shape = self->ndim > 0 ? self->shape : NULL;
		int strided = (flags & PyBUF_STRIDES) == PyBUF_STRIDES && self->ndim > 0;
		view->strides = strided ? self->shape + self->ndim : NULL;
		if ((flags & PyBUF_FORMAT) == PyBUF_FORMAT)
			view->format = (char *)self->dt->fmt;
		if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && !PyBuffer_IsContiguous(view, 'F')) {
			view->obj = NULL;
			Py_DECREF((PyObject *)self);
			PyErr_SetString(PyExc_BufferError, "View: the view is C-contiguous (row-major), not Fortran");
			return -1;
		}
	}
	owner_export_begin((PyObject *)self);
	return 0;
}

static void View_releasebuffer(ViewObject *self, Py_buffer *view)
{
	(void)view;
	owner_export_end((PyObject *)self);
}

static PyObject *View_dlpack(ViewObject *self, PyObject *args, PyObject *kwds)
{
	if (view_valid(self, "__dlpack__") < 0)
		return NULL;
	struct dl_what w = {{self->dt->code, self->dt->bits, 1}, self->offset, self->ndim, self->shape};
	return dl_export((PyObject *)self, self->blk, &w, args, kwds);
}

static PyObject *View_dlpack_device(ViewObject *self, PyObject *unused)
{
	(void)unused;
	if (view_valid(self, "__dlpack_device__") < 0)
		return NULL;
	return dl_device(self->blk);
}

static PyObject *View_release(ViewObject *self, PyObject *unused)
{
	(void)unused;
	if (self->exports > 0) {
		PyErr_Format(PyExc_BufferError, "View.release: %zd buffer(s) or tensor(s) of the view are alive",
			     self->exports);
		return NULL;
	}
	view_end(self);
	Py_RETURN_NONE;
}

static PyObject *View_enter(ViewObject *self, PyObject *unused)
{
	(void)unused;
	if (view_valid(self, "View.__enter__") < 0)
		return NULL;
	Py_INCREF((PyObject *)self);
	return (PyObject *)self;
}

static PyObject *View_exit(ViewObject *self, PyObject *args)
{
	(void)args;
	PyObject *r = View_release(self, NULL);
	if (r == NULL)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

static PyObject *View_dtype(ViewObject *self, void *c)
{
	(void)c;
	return PyUnicode_FromString(self->dt->name);
}

static PyObject *View_shape(ViewObject *self, void *c)
{
	(void)c;
	PyObject *t = PyTuple_New(self->ndim);
	for (int d = 0; t != NULL && d < self->ndim; d++) {
		PyObject *e = PyLong_FromSsize_t(self->shape[d]);
		if (e == NULL || PyTuple_SetItem(t, d, e) < 0)
			Py_CLEAR(t);
	}
	return t;
}

static PyObject *View_offset(ViewObject *self, void *c)
{
	(void)c;
	return PyLong_FromSize_t(self->offset);
}

static PyObject *View_nbytes(ViewObject *self, void *c)
{
	(void)c;
	return PyLong_FromSize_t(self->nbytes);
}

static PyObject *View_repr(ViewObject *self)
{
	PyObject *shape = View_shape(self, NULL);
	if (shape == NULL)
		return NULL;
	PyObject *r;
	if (self->blk == NULL)
		r = PyUnicode_FromFormat("<ringfetch.View %s %R (released)>", self->dt->name, shape);
	else
		r = PyUnicode_FromFormat("<ringfetch.View %s %R offset=%zu of block %zu>", self->dt->name, shape,
					 self->offset, self->blk->b.index);
	Py_DECREF(shape);
	return r;
}

static PyGetSetDef View_getset[] = {
	{"dtype", (getter)View_dtype, NULL, "The element type, as safetensors names it (\"F32\", \"BF16\", ...).",
	 NULL},
	{"shape", (getter)View_shape, NULL, "The extents (a tuple; row-major).", NULL},
	{"offset", (getter)View_offset, NULL, "Where the view starts in its block, in bytes.", NULL},
	{"nbytes", (getter)View_nbytes, NULL, "The bytes the view covers: the product of shape x the itemsize.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef View_methods[] = {
	{"__dlpack__", (PyCFunction)(void (*)(void))View_dlpack, METH_VARARGS | METH_KEYWORDS,
	 "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
	 "The view as a DLPack capsule of its dtype and shape, read-only; the protocol's arguments as for "
	 "Block.__dlpack__."},
	{"__dlpack_device__", (PyCFunction)View_dlpack_device, METH_NOARGS,
	 "(kDLCPU=1, 0) for a host block, (kDLCUDA=2, device) for a device block."},
	{"release", (PyCFunction)View_release, METH_NOARGS,
	 "release($self, /)\n--\n\n"
	 "End the view now (it then no longer counts as a view of its block). BufferError while a buffer or "
	 "tensor taken from it is alive. Releasing twice is a no-op."},
	{"__enter__", (PyCFunction)View_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)View_exit, METH_VARARGS, "release()"},
	{NULL, NULL, 0, NULL},
};

static PyType_Slot View_slots[] = {
	{Py_tp_dealloc, View_dealloc},
	{Py_tp_traverse, View_traverse},
	{Py_tp_repr, View_repr},
	{Py_tp_getset, View_getset},
	{Py_tp_methods, View_methods},
	{Py_bf_getbuffer, View_getbuffer},
	{Py_bf_releasebuffer, View_releasebuffer},
	{Py_tp_doc,
	 "A typed zero-copy window of a block's bytes: Block.view(dtype, shape, *, offset=0).\n\n"
	 "The buffer protocol with its format and shape (numpy.asarray(v) has that dtype and shape; BF16 and "
	 "the float8 kinds, which the buffer protocol cannot name, export their raw bits as unsigned integers "
	 "of their width) and DLPack with the real dtype (torch.from_dlpack(v)). Valid as long as its block "
	 "is; while it or anything taken from it lives, it counts as a view of the block. A context manager "
	 "(release() on exit)."},
	{0, NULL},
};
static PyType_Spec View_spec = {"ringfetch.View", sizeof(ViewObject), 0,
				 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
				 View_slots};

static PyObject *pipe_release_block(PipelineObject *self, BlockObject *b);

static PyObject *Block_enter(BlockObject *self, PyObject *unused)
{
	(void)unused;
	if (block_valid(self, "Block.__enter__") < 0)
		return NULL;
	Py_INCREF((PyObject *)self);
	return (PyObject *)self;
}

static PyObject *Block_exit(BlockObject *self, PyObject *args)
{
	(void)args;
	if (self->state != BLOCK_HELD)
		Py_RETURN_FALSE; /* a run's block: valid until its compute returns, nothing to give back */
	PyObject *r = pipe_release_block(self->pipe, self);
	if (r == NULL)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

static PyGetSetDef Block_getset[] = {
	{"index", (getter)Block_index, NULL, "The block's number in its run, or its key (acquire).", NULL},
	{"slot", (getter)Block_slot, NULL, "The ring slot that holds the bytes.", NULL},
	{"nbytes", (getter)Block_nbytes, NULL, "How many bytes the block has.", NULL},
	{"stream", (getter)Block_stream, NULL,
	 "The cudaStream_t to order work on (an int) on a device pipeline; None on a host pipeline.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Block_methods[] = {
	{"__dlpack__", (PyCFunction)(void (*)(void))Block_dlpack, METH_VARARGS | METH_KEYWORDS,
	 "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
	 "The block as a DLPack capsule: a 1-D uint8 tensor of nbytes, read-only (versioned capsules carry the "
	 "read-only flag). Host blocks: kDLCPU, stream None. Device blocks: kDLCUDA on the pipeline's device; "
	 "stream is the consumer's cudaStream_t (None or 1: legacy default, 2: per-thread default, -1: no "
	 "ordering), made to wait on the device for the block's work."},
	{"__dlpack_device__", (PyCFunction)Block_dlpack_device, METH_NOARGS,
	 "(kDLCPU=1, 0) for a host block, (kDLCUDA=2, device) for a device block."},
	{"view", (PyCFunction)(void (*)(void))Block_view, METH_VARARGS | METH_KEYWORDS,
	 "view($self, /, dtype, shape, *, offset=0)\n--\n\n"
	 "A typed zero-copy view (a ringfetch.View) of the block's bytes at offset: dtype as safetensors names "
	 "it (\"F32\", \"F16\", \"BF16\", \"F64\", \"I8\" .. \"I64\", \"U8\" .. \"U64\", \"BOOL\", \"C64\", "
	 "\"F8_E4M3\", \"F8_E5M2\", ...), shape a tuple of ints, row-major. offset (bytes) must be a multiple "
	 "of the itemsize, and offset + the view's bytes at most nbytes: a view may cover a prefix or any "
	 "window of the block. The view exports the buffer protocol (format and shape) and DLPack "
	 "(torch.from_dlpack(b.view(\"BF16\", (4096, 1024)))), is valid as long as the block is, and counts "
	 "as a view of the block while it or anything taken from it lives. rf.InvalidArgument for an unknown "
	 "dtype, a negative extent, a misaligned offset or a view past the block's bytes."},
	{"__enter__", (PyCFunction)Block_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)Block_exit, METH_VARARGS, "Release a held block (acquire)."},
	{NULL, NULL, 0, NULL},
};

static PyType_Slot Block_slots[] = {
	{Py_tp_dealloc, block_dealloc},
	{Py_tp_traverse, Block_traverse},
	{Py_tp_repr, Block_repr},
	{Py_tp_getset, Block_getset},
	{Py_tp_methods, Block_methods},
	{Py_bf_getbuffer, Block_getbuffer},
	{Py_bf_releasebuffer, Block_releasebuffer},
	{Py_tp_doc,
	 "One block in its slot: what compute() is given and acquire() returns.\n\n"
	 "Its bytes: the read-only buffer protocol (host memory: numpy.frombuffer(block, dtype), memoryview), "
	 "DLPack (numpy.from_dlpack, torch.from_dlpack) and typed views (block.view(dtype, shape)), all "
	 "zero-copy. A view may be used only while the block is valid: in compute() until it returns; after "
	 "acquire() until release(). release() while a view is alive raises BufferError and keeps the hold; a "
	 "compute that returns with a view alive stops the run with BufferError; using a block after its run "
	 "or release raises rf.InvalidArgument. A held block is a context manager that releases it."},
	{0, NULL},
};
static PyType_Spec Block_spec = {"ringfetch.Block", sizeof(BlockObject), 0,
				  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
				  Block_slots};

/* ---- Pipeline ---------------------------------------------------------------------------------------- */

static PyObject *Pipeline_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"slot_bytes", "depth",	  "backend", "memory",     "copy_queues",
				 "staging",    "wait",	  "device",  "hint_bytes", NULL};
	PyObject *slot_o, *depth_o = NULL, *backend_o = Py_None, *memory_o = NULL, *cq_o = NULL, *staging_o = Py_None,
			  *wait_o = Py_None, *device_o = NULL, *hint_o = NULL;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|$OOOOOOOO:Pipeline", kwlist, &slot_o, &depth_o, &backend_o,
					 &memory_o, &cq_o, &staging_o, &wait_o, &device_o, &hint_o))
		return NULL;
	rf_pipeline_params pp;
	memset(&pp, 0, sizeof pp);
	unsigned long long v;
	if (rfpy_uint(slot_o, "slot_bytes", SIZE_MAX, &v) < 0)
		return NULL;
	pp.slot_bytes = (size_t)v;
	if (depth_o != NULL) {
		if (PyUnicode_Check(depth_o)) {
			if (PyUnicode_CompareWithASCIIString(depth_o, "auto") != 0)
				return rfpy_raisef(RF_EINVAL, "depth must be an int or \"auto\", got %R", depth_o);
			pp.depth_auto = RF_DEPTH_AUTO;
		} else if (PyLong_Check(depth_o) || PyIndex_Check(depth_o)) {
			if (rfpy_uint(depth_o, "depth", UINT_MAX, &v) < 0)
				return NULL;
			pp.depth = (unsigned)v;
		} else {
			return rfpy_type_error("depth", "an int or \"auto\"", depth_o);
		}
	}
	if (rfpy_optstr(backend_o, "backend", &pp.backend) < 0 || rfpy_optstr(staging_o, "staging", &pp.staging) < 0 ||
	    rfpy_optstr(wait_o, "wait", &pp.wait) < 0)
		return NULL;
	if (memory_o != NULL) {
		if (!PyUnicode_Check(memory_o))
			return rfpy_type_error("memory", "\"host\" or \"device\"", memory_o);
		if (PyUnicode_CompareWithASCIIString(memory_o, "host") == 0)
			pp.memory = RF_MEMORY_HOST;
		else if (PyUnicode_CompareWithASCIIString(memory_o, "device") == 0)
			pp.memory = RF_MEMORY_DEVICE;
		else
			return rfpy_raisef(RF_EINVAL, "memory must be \"host\" or \"device\", got %R", memory_o);
	}
	if (cq_o != NULL) {
		if (rfpy_uint(cq_o, "copy_queues", UINT_MAX, &v) < 0)
			return NULL;
		pp.copy_queues = (unsigned)v;
	}
	if (device_o != NULL) {
		if (rfpy_uint(device_o, "device", INT_MAX, &v) < 0)
			return NULL;
		pp.device = (int)v;
	}
	if (hint_o != NULL) {
		if (rfpy_uint(hint_o, "hint_bytes", UINT64_MAX, &v) < 0)
			return NULL;
		pp.hint_bytes = (uint64_t)v;
	}

	PipelineObject *self = (PipelineObject *)PyType_GenericAlloc(type, 0);
	if (self == NULL)
		return NULL;
	self->next_pipe = rfpy_pipes;
	if (rfpy_pipes != NULL)
		rfpy_pipes->prev_pipe = self;
	rfpy_pipes = self;
	self->device = pp.device;
	self->memory = (int)pp.memory;
	self->pins_sweep_at = RFPY_PINS_SLACK;
	self->pins = PyDict_New();
	if (self->pins == NULL) {
		Py_DECREF((PyObject *)self);
		return PyErr_NoMemory();
	}
	rf_pipeline *p = NULL;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = rf_pipeline_create(&pp, &p);
	Py_END_ALLOW_THREADS
	if (rc != RF_OK) {
		rfpy_raise(rc);
		Py_DECREF((PyObject *)self);
		return NULL;
	}
	self->p = p;
	self->inline_copies = strcmp(rf_pipeline_backend(p), "cpu") == 0;
	return (PyObject *)self;
}

/* Destroy (GIL released: it joins workers, synchronises a device), then let go of the pinned sources.
 * self->p is cleared first, under the GIL, so that no call on another thread can reach it. */
static void pipe_destroy(PipelineObject *self)
{
	rf_pipeline *p = self->p;
	self->p = NULL;
	if (p != NULL) {
		Py_BEGIN_ALLOW_THREADS
		rf_pipeline_destroy(p);
		Py_END_ALLOW_THREADS
	}
	if (self->pins)
		PyDict_Clear(self->pins);
}

/* The pins (a private dict of private, untracked Pin objects) are the pipeline's own: it visits the
 * source each one holds, one reference per Pin, as if it held them itself. They are not left to the
 * collector to clear on their own, which could release a source while a hint's copy still reads it. */
static int Pipeline_traverse(PipelineObject *self, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE((PyObject *)self));
	if (self->pins != NULL) {
		Py_ssize_t pos = 0;
		PyObject *k, *v;
		while (PyDict_Next(self->pins, &pos, &k, &v))
			Py_VISIT(((PinObject *)v)->view.obj);
	}
	return 0;
}

/*
 * A pipeline in a cycle that is garbage: drain its copies (evict every key it pins a source of: once that
 * returns no copy reads the source; a held key's copy is done), then let go of its sources, which breaks
 * the cycle. It is not destroyed here: the collector clears a cycle's objects in no set order, and
 * another pipeline of the same cycle may still be copying from this one's slots (a held block of it as
 * a hint's source) until that one is cleared in turn. It is destroyed when its last Block goes, which
 * drops the holds left; its Blocks and Views keep pointing at it until then, never read again.
 */
static int Pipeline_clear(PipelineObject *self)
{
	if (self->p == NULL || self->pins == NULL) {
		if (self->pins)
			PyDict_Clear(self->pins);
		return 0;
	}
	PyObject *et, *ev, *etb;
	PyErr_Fetch(&et, &ev, &etb);
	Py_ssize_t n = PyDict_Size(self->pins);
	uint64_t *keys = n > 0 ? PyMem_Calloc((size_t)n, sizeof *keys) : NULL;
	if (n > 0 && keys == NULL) {
		/* No memory to drain: keep the sources (the cycle lives on to a later collection). */
		PyErr_Clear();
		PyErr_Restore(et, ev, etb);
		return 0;
	}
	Py_ssize_t pos = 0, nk = 0;
	PyObject *k, *v;
	while (nk < n && PyDict_Next(self->pins, &pos, &k, &v)) {
		unsigned long long key = PyLong_AsUnsignedLongLong(k);
		if (key == (unsigned long long)-1 && PyErr_Occurred()) {
			/* Never so (keys are stored as ints in range), but a pin whose key cannot be evicted
			 * must not be let go: keep them all. */
			PyMem_Free(keys);
			PyErr_Clear();
			PyErr_Restore(et, ev, etb);
			return 0;
		}
		keys[nk++] = (uint64_t)key;
	}
	rf_pipeline *p = self->p;
	Py_BEGIN_ALLOW_THREADS
	for (Py_ssize_t i = 0; i < nk; i++)
		(void)rf_pipeline_evict(p, keys[i]); /* RF_EBUSY for a held key: its copy has landed */
	Py_END_ALLOW_THREADS
	PyMem_Free(keys);
	PyDict_Clear(self->pins);
	PyErr_Clear();
	PyErr_Restore(et, ev, etb);
	return 0;
}

static void Pipeline_dealloc(PipelineObject *self)
{
	PyTypeObject *tp = Py_TYPE((PyObject *)self);
	PyObject_GC_UnTrack(self);
	if (self->prev_pipe != NULL)
		self->prev_pipe->next_pipe = self->next_pipe;
	else
		rfpy_pipes = self->next_pipe;
	if (self->next_pipe != NULL)
		self->next_pipe->prev_pipe = self->prev_pipe;
	if (self->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)self);
	/* Any Block of it would hold a reference, so none is left: no view, no hold of a Block object. Holds
	 * are dropped by destroy, as in C. */
	pipe_destroy(self);
	Py_CLEAR(self->pins);
	PyObject_GC_Del(self);
	Py_DECREF(tp);
}

static PyObject *Pipeline_close(PipelineObject *self, PyObject *unused)
{
	(void)unused;
	if (self->p == NULL)
		Py_RETURN_NONE;
	if (pipe_enter(self, "close") < 0)
		return NULL;
	if (self->exports > 0) {
		pipe_leave(self);
		PyErr_Format(PyExc_BufferError, "close: %zd view(s) of the pipeline's blocks are still alive",
			     self->exports);
		return NULL;
	}
	pipe_destroy(self);
	pipe_leave(self);
	Py_RETURN_NONE;
}

static PyObject *Pipeline_enter(PipelineObject *self, PyObject *unused)
{
	(void)unused;
	if (pipe_open(self, "Pipeline.__enter__") < 0)
		return NULL;
	Py_INCREF((PyObject *)self);
	return (PyObject *)self;
}

static PyObject *Pipeline_exit(PipelineObject *self, PyObject *args)
{
	(void)args;
	PyObject *r = Pipeline_close(self, NULL);
	if (r == NULL)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

struct run_ctx {
	PipelineObject *self;
	PyObject *compute;
	PyObject *et, *ev, *etb; /* the exception compute raised */
};

/* The compute trampoline: on the thread that called run() (every backend computes there), which released
 * the GIL around rf_pipeline_run; take it back for the Python call. */
static int run_compute(void *user, const rf_block *b)
{
	struct run_ctx *ctx = user;
	PyGILState_STATE g = PyGILState_Ensure();
	int fail = 1;
	BlockObject *blk = (BlockObject *)block_new(ctx->self, b, BLOCK_RUN);
	if (blk != NULL) {
		PyObject *r = PyObject_CallFunctionObjArgs(ctx->compute, (PyObject *)blk, NULL);
		fail = r == NULL;
		Py_XDECREF(r); /* a view returned by compute is not kept */
		blk->state = BLOCK_DONE;
		if (blk->exports > 0) {
			/* Once compute returns, the library may refill the slot: a view alive now would read
			 * another block's bytes. Stop the run, and keep every slot as it is while they live. */
			blk->kept = 1;
			ctx->self->kept += blk->exports;
			ctx->self->kept_index = b->index;
			if (!fail)
				PyErr_Format(PyExc_BufferError,
					     "run: compute returned while %zd view(s) of block %zu were alive (a view "
					     "may be used only until its compute returns: copy what must outlive it)",
					     blk->exports, b->index);
			fail = 1;
		}
		Py_DECREF((PyObject *)blk);
	}
	if (fail)
		PyErr_Fetch(&ctx->et, &ctx->ev, &ctx->etb);
	PyGILState_Release(g);
	return fail;
}

static PyObject *Pipeline_run(PipelineObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"sources", "compute", NULL};
	PyObject *sources, *compute;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:run", kwlist, &sources, &compute))
		return NULL;
	if (pipe_open(self, "run") < 0)
		return NULL;
	if (!PyCallable_Check(compute))
		return rfpy_type_error("compute", "callable", compute);
	if (PyUnicode_Check(sources) || PyObject_CheckBuffer(sources) || !PySequence_Check(sources))
		return rfpy_type_error("sources", "a sequence of bytes-like objects", sources);
	PyObject *list = PySequence_List(sources);
	if (list == NULL)
		return NULL;
	Py_ssize_t n = PyList_Size(list);
	Py_buffer *views = PyMem_Calloc(n ? (size_t)n : 1, sizeof *views);
	const void **srcs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *srcs);
	size_t *sizes = PyMem_Calloc(n ? (size_t)n : 1, sizeof *sizes);
	PyObject *ret = NULL;
	Py_ssize_t got = 0;
	if (views == NULL || srcs == NULL || sizes == NULL) {
		PyErr_NoMemory();
		goto out;
	}
	for (; got < n; got++) {
		if (rfpy_src_get(PyList_GetItem(list, got), &views[got], "source", got) < 0)
			goto out;
		srcs[got] = views[got].buf;
		sizes[got] = (size_t)views[got].len;
	}
	if (pipe_kept_check(self, "run") < 0 || pipe_enter(self, "run") < 0)
		goto out;
	struct run_ctx ctx = {self, compute, NULL, NULL, NULL};
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = rf_pipeline_run(self->p, (size_t)n, srcs, sizes, run_compute, &ctx);
	Py_END_ALLOW_THREADS
	/* A run that started work emptied the keyed cache: the sources of its keys are free. */
	if (n > 0 && rc != RF_EINVAL && rc != RF_EBUSY)
		pins_sweep(self);
	pipe_leave(self);
	if (ctx.et != NULL) {
		/* compute raised: that exception, of its own type, is run()'s. */
		PyErr_Restore(ctx.et, ctx.ev, ctx.etb);
		goto out;
	}
	if (rc != RF_OK) {
		rfpy_raise(rc);
		goto out;
	}
	ret = Py_None;
	Py_INCREF(ret);
out:
	for (Py_ssize_t i = 0; i < got; i++)
		PyBuffer_Release(&views[i]);
	PyMem_Free(views);
	PyMem_Free(srcs);
	PyMem_Free(sizes);
	Py_DECREF(list);
	return ret;
}

/* The key as a uint64 and as the int that names it in self->pins (a new reference; numpy integers
 * become ints, so that every spelling of a key is one dict entry). NULL on error. */
static PyObject *key_arg(PyObject *o, uint64_t *key)
{
	unsigned long long v;
	if (rfpy_uint(o, "key", UINT64_MAX, &v) < 0)
		return NULL;
	*key = (uint64_t)v;
	if (PyLong_CheckExact(o)) {
		Py_INCREF(o);
		return o;
	}
	return PyNumber_Index(o);
}

/* The source of a keyed call. When it is the very object pinned for the key, its pinned buffer serves (no
 * new buffer request: the serving loop's hit path; a pinned object cannot change its memory, its buffer
 * being held); else a new buffer, and what to pin (pin_prepare). Called with the pipeline entered. */
struct ksrc {
	Py_buffer view;
	int own; /* view is ours to release */
	const void *buf;
	size_t len;
	PyObject *pin; /* to store once the call succeeded */
};

static int ksrc_get(PipelineObject *self, PyObject *key_o, uint64_t key, PyObject *src, struct ksrc *ks)
{
	ks->own = 0;
	ks->pin = NULL;
	PinObject *old = (PinObject *)PyDict_GetItemWithError(self->pins, key_o);
	if (old == NULL && PyErr_Occurred())
		return -1;
	if (old != NULL && old->view.obj == src) {
		ks->buf = old->view.buf;
		ks->len = (size_t)old->view.len;
		return 0;
	}
	if (rfpy_src_get(src, &ks->view, "src", -1) < 0)
		return -1;
	ks->own = 1;
	ks->buf = ks->view.buf;
	ks->len = (size_t)ks->view.len;
	if (pin_prepare(self, key_o, key, &ks->view, &ks->pin) < 0) {
		PyBuffer_Release(&ks->view);
		ks->own = 0;
		return -1;
	}
	return 0;
}

static void ksrc_done(struct ksrc *ks)
{
	Py_XDECREF(ks->pin);
	if (ks->own)
		PyBuffer_Release(&ks->view);
}

/* acquire(key, src, *, stream=None) — vectorcall-style: the serving loop's hot path. */
static PyObject *Pipeline_acquire(PipelineObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
	PyObject *stream_o = Py_None;
	Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
	if (nargs != 2) {
		PyErr_Format(PyExc_TypeError, "acquire() takes 2 positional arguments (key, src), %zd given", nargs);
		return NULL;
	}
	for (Py_ssize_t i = 0; i < nkw; i++) {
		PyObject *name = PyTuple_GetItem(kwnames, i);
		if (PyUnicode_CompareWithASCIIString(name, "stream") != 0) {
			PyErr_Format(PyExc_TypeError, "acquire() got an unexpected keyword argument '%U'", name);
			return NULL;
		}
		stream_o = args[nargs + i];
	}
	void *stream = NULL;
	if (stream_o != Py_None) {
		unsigned long long s;
		if (rfpy_uint(stream_o, "stream", UINTPTR_MAX, &s) < 0)
			return NULL;
		stream = (void *)(uintptr_t)s;
	}
	uint64_t key;
	PyObject *key_o = key_arg(args[0], &key);
	if (key_o == NULL)
		return NULL;
	if (pipe_kept_check(self, "acquire") < 0 || pipe_enter(self, "acquire") < 0) {
		Py_DECREF(key_o);
		return NULL;
	}
	PyObject *ret = NULL;
	struct ksrc ks;
	if (ksrc_get(self, key_o, key, args[1], &ks) < 0)
		goto out;
	rf_block b;
	rf_key_state st = RF_KEY_ABSENT;
	(void)rf_pipeline_lookup(self->p, key, &st, NULL);
	int rc;
	if (st == RF_KEY_READY) {
		/* A hit on a finished copy: no wait, keep the GIL (this is the path that must cost well under a
		 * microsecond). */
		rc = rf_pipeline_acquire(self->p, key, ks.buf, ks.len, stream, 0, &b);
	} else {
		Py_BEGIN_ALLOW_THREADS
		rc = rf_pipeline_acquire(self->p, key, ks.buf, ks.len, stream, 0, &b);
		Py_END_ALLOW_THREADS
	}
	if (rc != RF_OK) {
		rfpy_raise(rc);
		goto done;
	}
	if (ks.pin != NULL && PyDict_SetItem(self->pins, key_o, ks.pin) < 0)
		goto undo;
	ret = block_new(self, &b, BLOCK_HELD);
	if (ret == NULL)
		goto undo;
	if (ks.pin != NULL)
		pins_added(self);
	goto done;
undo:
	(void)rf_pipeline_release(self->p, &b);
done:
	ksrc_done(&ks);
out:
	pipe_leave(self);
	Py_DECREF(key_o);
	return ret;
}

static PyObject *Pipeline_prefetch(PipelineObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
	if (nargs != 2 || (kwnames && PyTuple_Size(kwnames) > 0)) {
		PyErr_SetString(PyExc_TypeError, "prefetch() takes exactly 2 positional arguments (key, src)");
		return NULL;
	}
	uint64_t key;
	PyObject *key_o = key_arg(args[0], &key);
	if (key_o == NULL)
		return NULL;
	if (pipe_kept_check(self, "prefetch") < 0 || pipe_enter(self, "prefetch") < 0) {
		Py_DECREF(key_o);
		return NULL;
	}
	PyObject *ret = NULL;
	struct ksrc ks;
	if (ksrc_get(self, key_o, key, args[1], &ks) < 0)
		goto out;
	rf_key_state st = RF_KEY_ABSENT;
	(void)rf_pipeline_lookup(self->p, key, &st, NULL);
	int rc;
	if (st != RF_KEY_ABSENT || !self->inline_copies) {
		/* A refresh, or a hint handed to a copy lane: nothing waits. */
		rc = rf_pipeline_prefetch(self->p, key, ks.buf, ks.len, 0);
	} else {
		Py_BEGIN_ALLOW_THREADS
		rc = rf_pipeline_prefetch(self->p, key, ks.buf, ks.len, 0);
		Py_END_ALLOW_THREADS
	}
	if (rc != RF_OK) {
		rfpy_raise(rc);
		goto done;
	}
	/* The hint succeeded: its copy may read src from now on, so src is pinned even if the Python call
	 * fails from here (it is let go at evict, a run, close, or once the key has left the cache). */
	if (ks.pin != NULL && PyDict_SetItem(self->pins, key_o, ks.pin) < 0)
		goto done;
	if (ks.pin != NULL)
		pins_added(self);
	ret = Py_None;
	Py_INCREF(ret);
done:
	ksrc_done(&ks);
out:
	pipe_leave(self);
	Py_DECREF(key_o);
	return ret;
}

static PyObject *pipe_release_block(PipelineObject *self, BlockObject *b)
{
	if (b->pipe != self)
		return rfpy_raisef(RF_EINVAL, "release: block %zu belongs to another pipeline", b->b.index);
	if (block_valid(b, "release") < 0)
		return NULL;
	if (b->state != BLOCK_HELD)
		return rfpy_raisef(RF_EINVAL, "release: block %zu is a run's block, not a held one (acquire)",
				   b->b.index);
	if (b->exports > 0) {
		PyErr_Format(PyExc_BufferError,
			     "release: %zd view(s) of block %zu are still alive; the block stays held (drop the views "
			     "first)",
			     b->exports, b->b.index);
		return NULL;
	}
	if (pipe_enter(self, "release") < 0)
		return NULL;
	int rc = rf_pipeline_release(self->p, &b->b);
	pipe_leave(self);
	if (rc != RF_OK)
		return rfpy_raise(rc);
	b->state = BLOCK_DONE;
	Py_RETURN_NONE;
}

static PyObject *Pipeline_release(PipelineObject *self, PyObject *b)
{
	if (!PyObject_TypeCheck(b, Block_Type))
		return rfpy_type_error("release: block", "a ringfetch.Block", b);
	return pipe_release_block(self, (BlockObject *)b);
}

/* The key's source stays pinned: a hint copy that started may still read it (and a later acquire may
 * name it again); evict or close lets go of it, as for any key. */
static PyObject *Pipeline_unprefetch(PipelineObject *self, PyObject *arg)
{
	uint64_t key;
	PyObject *key_o = key_arg(arg, &key);
	if (key_o == NULL)
		return NULL;
	Py_DECREF(key_o);
	if (pipe_enter(self, "unprefetch") < 0)
		return NULL;
	int rc = rf_pipeline_unprefetch(self->p, key); /* never waits: the GIL stays */
	pipe_leave(self);
	if (rc != RF_OK)
		return rfpy_raise(rc);
	Py_RETURN_NONE;
}

static PyObject *Pipeline_evict(PipelineObject *self, PyObject *arg)
{
	uint64_t key;
	PyObject *key_o = key_arg(arg, &key);
	if (key_o == NULL)
		return NULL;
	if (pipe_enter(self, "evict") < 0) {
		Py_DECREF(key_o);
		return NULL;
	}
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = rf_pipeline_evict(self->p, key);
	Py_END_ALLOW_THREADS
	PyObject *ret = NULL;
	if (rc != RF_OK) {
		rfpy_raise(rc);
	} else if (PyDict_DelItem(self->pins, key_o) < 0 && !PyErr_ExceptionMatches(PyExc_KeyError)) {
		/* nothing more: ret stays NULL */
	} else {
		PyErr_Clear();
		ret = Py_None;
		Py_INCREF(ret);
	}
	pipe_leave(self);
	Py_DECREF(key_o);
	return ret;
}

/* keyed_trace(path): start recording keyed calls to path (str, bytes or os.PathLike), or stop (None).
 * Start creates the file and writes its header, stop writes the buffered records and closes it: both
 * may block on the file system, so the GIL is released around the call. */
static PyObject *Pipeline_keyed_trace(PipelineObject *self, PyObject *arg)
{
	PyObject *path_b = NULL;
	if (arg != Py_None && !PyUnicode_FSConverter(arg, &path_b))
		return NULL;
	const char *path = path_b != NULL ? PyBytes_AsString(path_b) : NULL;
	if (path_b != NULL && path == NULL) {
		Py_DECREF(path_b);
		return NULL;
	}
	if (pipe_enter(self, "keyed_trace") < 0) {
		Py_XDECREF(path_b);
		return NULL;
	}
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = rf_pipeline_keyed_trace(self->p, path, 0);
	Py_END_ALLOW_THREADS
	pipe_leave(self);
	Py_XDECREF(path_b);
	if (rc != RF_OK)
		return rfpy_raise(rc);
	Py_RETURN_NONE;
}

static PyObject *Pipeline_lookup(PipelineObject *self, PyObject *arg)
{
	uint64_t key;
	PyObject *key_o = key_arg(arg, &key);
	if (key_o == NULL)
		return NULL;
	Py_DECREF(key_o);
	if (pipe_open(self, "lookup") < 0)
		return NULL;
	rf_key_state st;
	unsigned slot = 0;
	int rc = rf_pipeline_lookup(self->p, key, &st, &slot);
	if (rc != RF_OK)
		return rfpy_raise(rc);
	if (st == RF_KEY_ABSENT)
		return Py_BuildValue("(sO)", "absent", Py_None);
	return Py_BuildValue("(sI)", st == RF_KEY_READY ? "ready" : "copying", slot);
}

static PyObject *Pipeline_cancel(PipelineObject *self, PyObject *unused)
{
	(void)unused;
	if (pipe_open(self, "cancel") < 0)
		return NULL;
	int rc = rf_pipeline_cancel(self->p);
	if (rc != RF_OK)
		return rfpy_raise(rc);
	Py_RETURN_NONE;
}

/* cancel_clear(): between runs, on the thread that runs the pipeline (entering it refuses a call made
 * while a run is in progress, from its compute or from another thread). */
static PyObject *Pipeline_cancel_clear(PipelineObject *self, PyObject *unused)
{
	(void)unused;
	if (pipe_enter(self, "cancel_clear") < 0)
		return NULL;
	int rc = rf_pipeline_cancel_clear(self->p);
	pipe_leave(self);
	if (rc != RF_OK)
		return rfpy_raise(rc);
	Py_RETURN_NONE;
}

static PyObject *Pipeline_collect_stats(PipelineObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"on", NULL};
	int on = 1;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:collect_stats", kwlist, &on))
		return NULL;
	if (pipe_enter(self, "collect_stats") < 0)
		return NULL;
	int rc = rf_pipeline_collect_stats(self->p, on);
	pipe_leave(self);
	if (rc != RF_OK)
		return rfpy_raise(rc);
	Py_RETURN_NONE;
}

static PyObject *Pipeline_describe(PipelineObject *self, PyObject *unused)
{
	(void)unused;
	if (pipe_open(self, "describe") < 0)
		return NULL;
	return PyUnicode_FromString(rf_pipeline_describe(self->p));
}

static PyObject *Pipeline_stats(PipelineObject *self, PyObject *unused)
{
	(void)unused;
	if (pipe_open(self, "stats") < 0)
		return NULL;
	rf_stats st;
	int rc = rf_pipeline_stats(self->p, &st);
	if (rc != RF_OK)
		return rfpy_raise(rc);
	unsigned nq = st.nqueues < RF_STATS_QUEUES ? st.nqueues : RF_STATS_QUEUES;
	PyObject *queues = PyList_New(nq);
	if (queues == NULL)
		return NULL;
	for (unsigned i = 0; i < nq; i++) {
		PyObject *q = Py_BuildValue("{sKsKsKsK}", "busy_ns", (unsigned long long)st.queue[i].busy_ns, "wait_ns",
					    (unsigned long long)st.queue[i].wait_ns, "copies",
					    (unsigned long long)st.queue[i].copies, "computes",
					    (unsigned long long)st.queue[i].computes);
		if (q == NULL) {
			Py_DECREF(queues);
			return NULL;
		}
		PyList_SetItem(queues, i, q);
	}
	PyObject *d = Py_BuildValue(
		"{snsKsKsOsIsNsKsKsdsKsKsKsKsKsKsKsKsKsKsKsKsKsK}", "blocks", (Py_ssize_t)st.blocks, "bytes",
		(unsigned long long)st.bytes, "wall_ns", (unsigned long long)st.wall_ns, "timed",
		st.timed ? Py_True : Py_False, "nqueues", st.nqueues, "queue", queues, "copy_ns",
		(unsigned long long)st.copy_ns, "exposed_ns", (unsigned long long)st.exposed_ns, "overlap_efficiency",
		st.overlap_efficiency, "runs", (unsigned long long)st.runs, "total_blocks",
		(unsigned long long)st.total_blocks, "total_bytes", (unsigned long long)st.total_bytes, "total_wall_ns",
		(unsigned long long)st.total_wall_ns, "timed_runs", (unsigned long long)st.timed_runs,
		"total_exposed_ns", (unsigned long long)st.total_exposed_ns, "total_wait_ns",
		(unsigned long long)st.total_wait_ns, "file_bytes", (unsigned long long)st.file_bytes,
		"total_file_bytes", (unsigned long long)st.total_file_bytes, "schedule", (unsigned long long)st.schedule,
		"inline_runs", (unsigned long long)st.inline_runs, "handoff_runs", (unsigned long long)st.handoff_runs,
		"ahead_bytes", (unsigned long long)st.ahead_bytes, "total_ahead_blocks",
		(unsigned long long)st.total_ahead_blocks);
	return d;
}

static PyObject *Pipeline_keyed_stats(PipelineObject *self, PyObject *unused)
{
	(void)unused;
	if (pipe_open(self, "keyed_stats") < 0)
		return NULL;
	rf_keyed_stats ks;
	int rc = rf_pipeline_keyed_stats(self->p, &ks);
	if (rc != RF_OK)
		return rfpy_raise(rc);
	return Py_BuildValue("{sKsKsKsKsKsKsK}", "acquires", (unsigned long long)ks.acquires, "hits",
			     (unsigned long long)ks.hits, "late", (unsigned long long)ks.late, "prefetches",
			     (unsigned long long)ks.prefetches, "dropped", (unsigned long long)ks.dropped, "wasted",
			     (unsigned long long)ks.wasted, "bytes_copied", (unsigned long long)ks.bytes_copied);
}

static PyObject *Pipeline_depth(PipelineObject *self, void *c)
{
	(void)c;
	if (pipe_open(self, "Pipeline.depth") < 0)
		return NULL;
	return PyLong_FromUnsignedLong(rf_pipeline_depth(self->p));
}

static PyObject *Pipeline_backend(PipelineObject *self, void *c)
{
	(void)c;
	if (pipe_open(self, "Pipeline.backend") < 0)
		return NULL;
	return PyUnicode_FromString(rf_pipeline_backend(self->p));
}

static PyObject *Pipeline_slot_bytes(PipelineObject *self, void *c)
{
	(void)c;
	if (pipe_open(self, "Pipeline.slot_bytes") < 0)
		return NULL;
	return PyLong_FromSize_t(rf_pipeline_slot_bytes(self->p));
}

static PyObject *Pipeline_copy_queues(PipelineObject *self, void *c)
{
	(void)c;
	if (pipe_open(self, "Pipeline.copy_queues") < 0)
		return NULL;
	return PyLong_FromUnsignedLong(rf_pipeline_copy_queues(self->p));
}

static PyObject *Pipeline_closed(PipelineObject *self, void *c)
{
	(void)c;
	return PyBool_FromLong(self->p == NULL);
}

static PyObject *Pipeline_repr(PipelineObject *self)
{
	if (self->p == NULL)
		return PyUnicode_FromString("<ringfetch.Pipeline (closed)>");
	return PyUnicode_FromFormat("<ringfetch.Pipeline backend=%s depth=%u slot_bytes=%zu>",
				    rf_pipeline_backend(self->p), rf_pipeline_depth(self->p),
				    rf_pipeline_slot_bytes(self->p));
}

static PyGetSetDef Pipeline_getset[] = {
	{"depth", (getter)Pipeline_depth, NULL, "The ring depth runs use now (with depth=\"auto\": the chosen one).",
	 NULL},
	{"backend", (getter)Pipeline_backend, NULL, "The resolved backend: \"cpu\", \"threads\" or \"cuda\".", NULL},
	{"slot_bytes", (getter)Pipeline_slot_bytes, NULL, "The capacity of each slot, in bytes.", NULL},
	{"copy_queues", (getter)Pipeline_copy_queues, NULL, "The copy lanes (>= 1).", NULL},
	{"closed", (getter)Pipeline_closed, NULL, "True once close() has run.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Pipeline_methods[] = {
	{"run", (PyCFunction)(void (*)(void))Pipeline_run, METH_VARARGS | METH_KEYWORDS,
	 "run($self, /, sources, compute)\n--\n\n"
	 "Stream sources (a sequence of bytes-like objects: bytes, bytearray, numpy arrays, memoryview slices "
	 "of an rf.File, mixed) through the ring: compute(block) is called once per block, in order, on this "
	 "thread, while the next blocks are copied. The GIL is released while the library waits and copies. "
	 "An exception in compute stops the run (no compute after it, copies drained) and run() raises that "
	 "exception. A compute that returns while a view of its block is alive stops the run with BufferError; "
	 "until that view is dropped, run, acquire and prefetch raise BufferError (no slot is refilled under "
	 "it). Raises rf.Busy with a block held."},
	{"acquire", (PyCFunction)(void (*)(void))Pipeline_acquire, METH_FASTCALL | METH_KEYWORDS,
	 "acquire($self, key, src, /, *, stream=None)\n--\n\n"
	 "Hold key (an int in 0 .. 2**64-1) in its slot, copying src first unless the key is resident or on its "
	 "way; returns a Block (a context manager that releases it). stream: a cudaStream_t as an int on a "
	 "device pipeline (None or 0: the legacy default stream); None on a host pipeline. src is kept alive "
	 "until evict(key), a run, close(), or a later keyed call that finds the key gone from the cache."},
	{"prefetch", (PyCFunction)(void (*)(void))Pipeline_prefetch, METH_FASTCALL | METH_KEYWORDS,
	 "prefetch($self, key, src, /)\n--\n\n"
	 "A hint that key will be acquired soon: its copy starts now or when a copy lane frees; returns without "
	 "waiting (backend \"cpu\" copies inline). rf.NoSpace when every slot is held."},
	{"release", (PyCFunction)Pipeline_release, METH_O,
	 "release($self, block, /)\n--\n\n"
	 "Let go of one hold (the key stays resident until its slot is needed). BufferError, and the block "
	 "stays held, while a view of it (memoryview, numpy array, DLPack tensor) is alive."},
	{"unprefetch", (PyCFunction)Pipeline_unprefetch, METH_O,
	 "unprefetch($self, key, /)\n--\n\n"
	 "Withdraw the hint of key: dropped if its copy has not started, else it lands first in line for "
	 "eviction. Nothing happens for a key absent, held or acquired since its hint. Never waits."},
	{"evict", (PyCFunction)Pipeline_evict, METH_O,
	 "evict($self, key, /)\n--\n\n"
	 "Forget key (its source will change): the next acquire copies it again. Returns when no copy reads its "
	 "source any more, and lets go of that source. rf.Busy while the key is held."},
	{"keyed_trace", (PyCFunction)Pipeline_keyed_trace, METH_O,
	 "keyed_trace($self, path, /)\n--\n\n"
	 "Record this pipeline's keyed calls (acquire, prefetch, release, evict, and runs that empty the cache) "
	 "to path (a str or os.PathLike; created or truncated), in the access-trace format of docs/serving.md "
	 "that ringfetch-replay reads; None stops and closes the file (also when none is on). rf.Busy when one "
	 "is already on; rf.IOError when the file cannot be created, or (stop) when a write failed."},
	{"lookup", (PyCFunction)Pipeline_lookup, METH_O,
	 "lookup($self, key, /)\n--\n\n"
	 "(state, slot): where key stands, without waiting; state \"absent\" (slot None), \"copying\" or "
	 "\"ready\". Any thread."},
	{"cancel", (PyCFunction)Pipeline_cancel, METH_NOARGS,
	 "cancel($self, /)\n--\n\nStop the run in progress, or else the next run (rf.Canceled). Any thread."},
	{"cancel_clear", (PyCFunction)Pipeline_cancel_clear, METH_NOARGS,
	 "cancel_clear($self, /)\n--\n\n"
	 "Withdraw a pending cancel that no run has consumed (a cancel() that came after the run it meant had "
	 "ended would otherwise stop the next run); nothing pending: nothing happens. Between runs: rf.Busy "
	 "while a run or keyed call is in progress (another thread, or a compute callback)."},
	{"collect_stats", (PyCFunction)(void (*)(void))Pipeline_collect_stats, METH_VARARGS | METH_KEYWORDS,
	 "collect_stats($self, /, on=True)\n--\n\nCollect per-queue times (stats()['queue'], exposed_ns, ...) in later runs."},
	{"describe", (PyCFunction)Pipeline_describe, METH_NOARGS,
	 "describe($self, /)\n--\n\nOne line on how the pipeline runs (queues, workers and their cores, depth)."},
	{"stats", (PyCFunction)Pipeline_stats, METH_NOARGS,
	 "stats($self, /)\n--\n\nThe last finished run and totals since create (rf_stats' fields). Any thread."},
	{"keyed_stats", (PyCFunction)Pipeline_keyed_stats, METH_NOARGS,
	 "keyed_stats($self, /)\n--\n\nThe keyed counters since create (rf_keyed_stats' fields). Any thread."},
	{"close", (PyCFunction)Pipeline_close, METH_NOARGS,
	 "close($self, /)\n--\n\n"
	 "Destroy the pipeline (held blocks are dropped). rf.Busy while a run or keyed call is in progress; "
	 "BufferError while a view of one of its blocks is alive. Closing twice is a no-op."},
	{"__enter__", (PyCFunction)Pipeline_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)Pipeline_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyMemberDef Pipeline_members[] = {
	{"__weaklistoffset__", T_PYSSIZET, offsetof(PipelineObject, weakrefs), READONLY, NULL},
	{NULL, 0, 0, 0, NULL},
};

static PyType_Slot Pipeline_slots[] = {
	{Py_tp_new, Pipeline_new},
	{Py_tp_dealloc, Pipeline_dealloc},
	{Py_tp_traverse, Pipeline_traverse},
	{Py_tp_clear, Pipeline_clear},
	{Py_tp_repr, Pipeline_repr},
	{Py_tp_methods, Pipeline_methods},
	{Py_tp_getset, Pipeline_getset},
	{Py_tp_members, Pipeline_members},
	{Py_tp_doc,
	 "Pipeline(slot_bytes, *, depth=0, backend=None, memory=\"host\", copy_queues=0, staging=None, "
	 "wait=None, device=0, hint_bytes=0)\n--\n\n"
	 "A ring of depth slots of slot_bytes each, with its backend's queues (rf_pipeline_create; the keywords "
	 "are rf_pipeline_params' fields, 0 / None meaning the configured default). depth: an int or \"auto\". "
	 "memory: \"host\" (backends cpu, threads) or \"device\" (cuda, on GPU `device`). A context manager "
	 "(close() on exit). Wrong types raise TypeError, wrong values rf.InvalidArgument."},
	{0, NULL},
};
static PyType_Spec Pipeline_spec = {"ringfetch.Pipeline", sizeof(PipelineObject), 0,
				    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Pipeline_slots};

/* ---- plain reads of a File's mapping after the file shrank ----------------------------------------------
 *
 * rf.File exports its mapping to the buffer protocol, so bytes(memoryview(f)[a:b]), numpy and anything
 * else may read the mapping itself. A page past the file's current end (it shrank after open) or one the
 * system cannot read faults with SIGBUS, which would kill the interpreter. The package serves such reads
 * instead: a SIGBUS handler, installed when the first File is opened, maps a page of zeros over the
 * faulting page of a live File's mapping and returns, so the read goes on and sees zeros there; every
 * other SIGBUS (another address, or one sent by kill/raise) goes to the handler that was there before
 * (faulthandler's, for instance), or ends the process as SIGBUS does by default. The library's own reads
 * of such a range never touch the mapping and raise rf.IOError as before.
 *
 * The handler reads only a table of the live mappings, without locks: entries are written under the GIL
 * (one writer), an entry's start before its length and its length cleared first, and the table's chunks
 * are never freed, so the handler never reads freed memory and sees a range only while it is live.
 */
#define RFPY_MAPS_PER_CHUNK 64

struct rfpy_map {
	_Atomic uintptr_t lo; /* 0: free */
	_Atomic size_t len;   /* 0: free, or being filled in */
};

struct rfpy_maps {
	struct rfpy_map m[RFPY_MAPS_PER_CHUNK];
	struct rfpy_maps *_Atomic next;
};

static struct rfpy_maps rfpy_maps;
static struct sigaction rfpy_bus_prev;
static int rfpy_bus_installed;
static uintptr_t rfpy_page;

static int rfpy_map_find(uintptr_t a)
{
	for (struct rfpy_maps *c = &rfpy_maps; c != NULL; c = atomic_load_explicit(&c->next, memory_order_acquire))
		for (int i = 0; i < RFPY_MAPS_PER_CHUNK; i++) {
			size_t n = atomic_load_explicit(&c->m[i].len, memory_order_acquire);
			uintptr_t lo = atomic_load_explicit(&c->m[i].lo, memory_order_acquire);
			if (n != 0 && lo != 0 && a >= lo && a - lo < n &&
			    atomic_load_explicit(&c->m[i].len, memory_order_acquire) == n)
				return 1;
		}
	return 0;
}

/* Pass a SIGBUS that is not ours on, as if we had never been installed. */
static void rfpy_bus_chain(int sig, siginfo_t *si, void *uc)
{
	if (rfpy_bus_prev.sa_flags & SA_SIGINFO) {
		rfpy_bus_prev.sa_sigaction(sig, si, uc);
	} else if (rfpy_bus_prev.sa_handler != SIG_DFL && rfpy_bus_prev.sa_handler != SIG_IGN) {
		rfpy_bus_prev.sa_handler(sig);
	} else {
		/* The default action (a fault cannot be ignored): it takes effect once this handler returns,
		 * for a fault and for a signal that was sent alike. */
		struct sigaction dfl;
		memset(&dfl, 0, sizeof dfl);
		dfl.sa_handler = SIG_DFL;
		sigemptyset(&dfl.sa_mask);
		sigaction(sig, &dfl, NULL);
		raise(sig);
	}
}

static void rfpy_bus_handler(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	uintptr_t a = (uintptr_t)si->si_addr;
	/* Only faults the kernel reports on an address of a live File's mapping: past the end of the file,
	 * or a page it could not read (BUS_ADRERR, BUS_OBJERR); never a hardware memory error. */
	if ((si->si_code == BUS_ADRERR || si->si_code == BUS_OBJERR) && rfpy_map_find(a)) {
		void *page = (void *)(a & ~(rfpy_page - 1));
		void *z = mmap(page, (size_t)rfpy_page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		if (z != MAP_FAILED) {
			errno = saved;
			return; /* the read is retried, on zeros */
		}
	}
	errno = saved;
	rfpy_bus_chain(sig, si, uc);
}

/* Once, with the first File; again only where ours was taken away and SIGBUS went back to its default
 * (faulthandler.disable() restores what it found, which may be the default). Never over another
 * handler: one installed after ours may pass signals back to ours, and ours would pass them to it. */
static int rfpy_bus_install(void)
{
	if (rfpy_bus_installed) {
		struct sigaction cur;
		if (sigaction(SIGBUS, NULL, &cur) != 0 || (cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL)
			return 0;
		rfpy_bus_installed = 0;
	}
	rfpy_page = (uintptr_t)sysconf(_SC_PAGESIZE);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = rfpy_bus_handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, &rfpy_bus_prev) != 0) {
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	rfpy_bus_installed = 1;
	return 0;
}

/* Under the GIL. The mapping [data, data + size) rounded up to whole pages, as mmap maps it. */
static int rfpy_map_add(const void *data, uint64_t size)
{
	if (rfpy_bus_install() < 0)
		return -1;
	size_t len = (size_t)((size + rfpy_page - 1) & ~(uint64_t)(rfpy_page - 1));
	struct rfpy_maps *c = &rfpy_maps, *last = c;
	for (; c != NULL; last = c, c = atomic_load_explicit(&c->next, memory_order_acquire))
		for (int i = 0; i < RFPY_MAPS_PER_CHUNK; i++)
			if (atomic_load_explicit(&c->m[i].len, memory_order_relaxed) == 0) {
				atomic_store_explicit(&c->m[i].lo, (uintptr_t)data, memory_order_release);
				atomic_store_explicit(&c->m[i].len, len, memory_order_release);
				return 0;
			}
	struct rfpy_maps *n = calloc(1, sizeof *n);
	if (n == NULL) {
		PyErr_NoMemory();
		return -1;
	}
	atomic_store_explicit(&n->m[0].lo, (uintptr_t)data, memory_order_relaxed);
	atomic_store_explicit(&n->m[0].len, len, memory_order_relaxed);
	atomic_store_explicit(&last->next, n, memory_order_release); /* never freed: the handler may read it */
	return 0;
}

/* Under the GIL, before the mapping goes: from here on its addresses are not ours. */
static void rfpy_map_remove(const void *data)
{
	for (struct rfpy_maps *c = &rfpy_maps; c != NULL; c = atomic_load_explicit(&c->next, memory_order_acquire))
		for (int i = 0; i < RFPY_MAPS_PER_CHUNK; i++)
			if (atomic_load_explicit(&c->m[i].len, memory_order_relaxed) != 0 &&
			    atomic_load_explicit(&c->m[i].lo, memory_order_relaxed) == (uintptr_t)data) {
				atomic_store_explicit(&c->m[i].len, 0, memory_order_release);
				atomic_store_explicit(&c->m[i].lo, 0, memory_order_release);
				return;
			}
}

/* ---- File -------------------------------------------------------------------------------------------- */

static PyObject *File_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"path", "buffered", NULL};
	PyObject *path_b = NULL;
	int buffered = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|$p:File", kwlist, PyUnicode_FSConverter, &path_b, &buffered))
		return NULL;
	FileObject *self = (FileObject *)PyType_GenericAlloc(type, 0);
	if (self == NULL) {
		Py_DECREF(path_b);
		return NULL;
	}
	const char *path = PyBytes_AsString(path_b);
	rf_file *f = NULL;
	int rc = RF_EINVAL;
	if (path != NULL) {
		Py_BEGIN_ALLOW_THREADS
		rc = rf_file_open(path, buffered ? RF_FILE_BUFFERED : 0, &f);
		Py_END_ALLOW_THREADS
		if (rc != RF_OK)
			rfpy_raise(rc);
	}
	Py_DECREF(path_b);
	if (rc != RF_OK) {
		Py_DECREF((PyObject *)self);
		return NULL;
	}
	if (rfpy_map_add(rf_file_data(f), rf_file_size(f)) < 0) {
		Py_BEGIN_ALLOW_THREADS
		(void)rf_file_close(f);
		Py_END_ALLOW_THREADS
		Py_DECREF((PyObject *)self);
		return NULL;
	}
	self->f = f;
	return (PyObject *)self;
}

static void File_dealloc(FileObject *self)
{
	PyTypeObject *tp = Py_TYPE((PyObject *)self);
	if (self->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)self);
	/* Views hold a reference: none is left. A pipeline that may still copy from the file holds a view
	 * of it (its keyed source), so no copy reads it either. */
	if (self->f != NULL) {
		rf_file *f = self->f;
		self->f = NULL;
		rfpy_map_remove(rf_file_data(f));
		Py_BEGIN_ALLOW_THREADS
		(void)rf_file_close(f);
		Py_END_ALLOW_THREADS
	}
	PyObject_Free(self);
	Py_DECREF(tp);
}

static PyObject *File_close(FileObject *self, PyObject *unused)
{
	(void)unused;
	if (self->f == NULL)
		Py_RETURN_NONE;
	if (self->exports > 0) {
		pipes_sweep_all(); /* pipelines let go of the file's slices whose keys left their cache */
		if (self->f == NULL) /* closed by another thread meanwhile */
			Py_RETURN_NONE;
	}
	if (self->reads > 0)
		return rfpy_raisef(RF_EBUSY, "close: another thread is reading the file (File.pread)");
	if (self->exports > 0) {
		PyErr_Format(PyExc_BufferError,
			     "close: %zd view(s) of the file are still alive (memoryview slices, pipelines' keyed "
			     "sources: evict those keys or close those pipelines first)",
			     self->exports);
		return NULL;
	}
	int rc;
	rfpy_map_remove(rf_file_data(self->f));
	Py_BEGIN_ALLOW_THREADS
	rc = rf_file_close(self->f);
	Py_END_ALLOW_THREADS
	if (rc != RF_OK) {
		/* Still open and mapped (a copy reads it): its reads are served again. */
		PyObject *t, *v, *tb;
		rfpy_raise(rc);
		PyErr_Fetch(&t, &v, &tb);
		if (rfpy_map_add(rf_file_data(self->f), rf_file_size(self->f)) < 0)
			PyErr_Clear();
		PyErr_Restore(t, v, tb);
		return NULL;
	}
	self->f = NULL;
	Py_RETURN_NONE;
}

static PyObject *File_pread(FileObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"n", "offset", NULL};
	PyObject *n_o, *off_o;
	unsigned long long n, off;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:pread", kwlist, &n_o, &off_o))
		return NULL;
	if (rfpy_uint(n_o, "n", PY_SSIZE_T_MAX, &n) < 0 || rfpy_uint(off_o, "offset", UINT64_MAX, &off) < 0)
		return NULL;
	if (self->f == NULL)
		return rfpy_raisef(RF_EINVAL, "File.pread: the file is closed");
	uint64_t size = rf_file_size(self->f);
	if (off > size || n > size - off) /* before allocating n bytes: not a MemoryError for a huge n */
		return rfpy_raisef(RF_EINVAL, "File.pread: [%llu, +%llu) is not inside the file's %llu bytes", off, n,
				   (unsigned long long)size);
	PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
	if (b == NULL)
		return NULL;
	int rc;
	self->reads++;
	Py_BEGIN_ALLOW_THREADS
	rc = rf_file_read(self->f, off, PyBytes_AsString(b), (size_t)n);
	Py_END_ALLOW_THREADS
	self->reads--;
	if (rc != RF_OK) {
		Py_DECREF(b);
		return rfpy_raise(rc);
	}
	return b;
}

static int File_getbuffer(FileObject *self, Py_buffer *view, int flags)
{
	if (self->f == NULL) {
		rfpy_raisef(RF_EINVAL, "File: the file is closed");
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)self, (void *)rf_file_data(self->f), (Py_ssize_t)rf_file_size(self->f),
			      1, flags) < 0)
		return -1;
	self->exports++;
	return 0;
}

static void File_releasebuffer(FileObject *self, Py_buffer *view)
{
	(void)view;
	self->exports--;
}

static PyObject *File_size(FileObject *self, void *c)
{
	(void)c;
	if (self->f == NULL)
		return rfpy_raisef(RF_EINVAL, "File.size: the file is closed");
	return PyLong_FromUnsignedLongLong(rf_file_size(self->f));
}

static PyObject *File_closed(FileObject *self, void *c)
{
	(void)c;
	return PyBool_FromLong(self->f == NULL);
}

static PyObject *File_enter(FileObject *self, PyObject *unused)
{
	(void)unused;
	if (self->f == NULL)
		return rfpy_raisef(RF_EINVAL, "File.__enter__: the file is closed");
	Py_INCREF((PyObject *)self);
	return (PyObject *)self;
}

static PyObject *File_exit(FileObject *self, PyObject *args)
{
	(void)args;
	PyObject *r = File_close(self, NULL);
	if (r == NULL)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

static PyGetSetDef File_getset[] = {
	{"size", (getter)File_size, NULL, "The file's size in bytes when it was opened.", NULL},
	{"closed", (getter)File_closed, NULL, "True once close() has run.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef File_methods[] = {
	{"close", (PyCFunction)File_close, METH_NOARGS,
	 "close($self, /)\n--\n\n"
	 "Unmap and close. BufferError while a view of the file is alive (a memoryview, or a pipeline's keyed "
	 "source of a key still in its cache: evict the key or close the pipeline first; the sources of keys "
	 "that left the caches are let go first); rf.Busy while a copy reads it or File.pread runs on another "
	 "thread."},
	{"pread", (PyCFunction)(void (*)(void))File_pread, METH_VARARGS | METH_KEYWORDS,
	 "pread($self, /, n, offset)\n--\n\n"
	 "The n bytes at offset, as bytes (rf_file_read): read, with the GIL released, through the descriptor "
	 "the file was opened with, so they are this file's even where another was since renamed over its "
	 "path. rf.InvalidArgument for a range not inside size; rf.IOError where the read fails or the file "
	 "shrank. close() on another thread meanwhile is rf.Busy."},
	{"__enter__", (PyCFunction)File_enter, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)File_exit, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};

static PyMemberDef File_members[] = {
	{"__weaklistoffset__", T_PYSSIZET, offsetof(FileObject, weakrefs), READONLY, NULL},
	{NULL, 0, 0, 0, NULL},
};

static PyType_Slot File_slots[] = {
	{Py_tp_new, File_new},
	{Py_tp_dealloc, File_dealloc},
	{Py_tp_methods, File_methods},
	{Py_tp_getset, File_getset},
	{Py_tp_members, File_members},
	{Py_bf_getbuffer, File_getbuffer},
	{Py_bf_releasebuffer, File_releasebuffer},
	{Py_tp_doc,
	 "File(path, *, buffered=False)\n--\n\n"
	 "A regular file opened read-only as a source of blocks (rf_file_open). It exports the read-only "
	 "buffer protocol over its mapping: memoryview(f)[a:b] is a file source, which ringfetch reads from "
	 "the file (O_DIRECT unless buffered, several reads in flight) instead of faulting the mapping in. "
	 "Plain reads of the buffer never crash: after the file shrank, the bytes past its new end read as "
	 "zeros there (a SIGBUS handler maps zeros over the faulting page), while the library's reads of that "
	 "range raise rf.IOError. A context manager (close() on exit)."},
	{0, NULL},
};
static PyType_Spec File_spec = {"ringfetch.File", sizeof(FileObject), 0, Py_TPFLAGS_DEFAULT, File_slots};

/* ---- module functions ---------------------------------------------------------------------------------- */

static PyObject *rfpy_plan_ring(PyObject *mod, PyObject *args, PyObject *kwds)
{
	(void)mod;
	static char *kwlist[] = {"nblocks", "depth", NULL};
	PyObject *n_o, *d_o;
	if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:plan_ring", kwlist, &n_o, &d_o))
		return NULL;
	unsigned long long n, d;
	if (rfpy_uint(n_o, "nblocks", SIZE_MAX, &n) < 0 || rfpy_uint(d_o, "depth", UINT_MAX, &d) < 0)
		return NULL;
	size_t len = 0;
	int rc = rf_plan_ring((size_t)n, (unsigned)d, NULL, 0, &len);
	if (rc != RF_OK && rc != RF_ENOSPC)
		return rfpy_raise(rc);
	if (len > (size_t)PY_SSIZE_T_MAX / sizeof(rf_step))
		return rfpy_raisef(RF_ENOMEM, "plan_ring: %llu blocks need more steps than memory holds", n);
	rf_step *steps = PyMem_Malloc(len ? len * sizeof *steps : 1);
	if (steps == NULL)
		return rfpy_raisef(RF_ENOMEM, "plan_ring: no memory for the %zu steps of %llu blocks", len, n);
	rc = rf_plan_ring((size_t)n, (unsigned)d, steps, len, &len);
	if (rc != RF_OK) {
		PyMem_Free(steps);
		return rfpy_raise(rc);
	}
	static const char *const kinds[] = {"prefetch", "await", "compute"};
	PyObject *list = PyList_New((Py_ssize_t)len);
	for (size_t i = 0; list != NULL && i < len; i++) {
		PyObject *t = Py_BuildValue("(snI)", kinds[steps[i].kind], (Py_ssize_t)steps[i].block, steps[i].slot);
		if (t == NULL)
			Py_CLEAR(list);
		else
			PyList_SetItem(list, (Py_ssize_t)i, t);
	}
	PyMem_Free(steps);
	return list;
}

static PyMethodDef module_methods[] = {
	{"plan_ring", (PyCFunction)(void (*)(void))rfpy_plan_ring, METH_VARARGS | METH_KEYWORDS,
	 "plan_ring($module, /, nblocks, depth)\n--\n\n"
	 "The ring's schedule: 3*nblocks steps (kind, block, slot), kind in \"prefetch\", \"await\", "
	 "\"compute\", slot = block % depth (rf_plan_ring)."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT, "ringfetch._ringfetch",
	"The C extension behind the ringfetch package (import ringfetch, not this).", -1, module_methods,
	NULL, NULL, NULL, NULL,
};

static int add_errors(PyObject *m)
{
	PyObject *dict = Py_BuildValue("{ss}", "__module__", "ringfetch");
	if (dict == NULL)
		return -1;
	rfpy_err[0] = PyErr_NewExceptionWithDoc(
		"ringfetch.Error",
		"Every failure of ringfetch: .code is the negative RF_E* code, .name its name (\"RF_EINVAL\"), "
		"str() the library's sentence (rf_errmsg).",
		PyExc_Exception, dict);
	if (rfpy_err[0] == NULL || PyModule_AddObjectRef(m, "Error", rfpy_err[0]) < 0)
		goto fail;
	for (size_t i = 0; i < sizeof rfpy_errdefs / sizeof rfpy_errdefs[0]; i++) {
		char qual[64];
		snprintf(qual, sizeof qual, "ringfetch.%s", rfpy_errdefs[i].name);
		PyObject *bases = rfpy_errdefs[i].builtin ? PyTuple_Pack(2, rfpy_err[0], *rfpy_errdefs[i].builtin)
							  : PyTuple_Pack(1, rfpy_err[0]);
		if (bases == NULL)
			goto fail;
		int code = rfpy_errdefs[i].code;
		PyObject *cls = PyErr_NewExceptionWithDoc(qual, rf_strerror(code), bases, dict);
		Py_DECREF(bases);
		if (cls == NULL)
			goto fail;
		rfpy_err[-code] = cls;
		PyObject *c = PyLong_FromLong(code), *n = PyUnicode_FromString(rf_err_name(code));
		int bad = c == NULL || n == NULL || PyObject_SetAttrString(cls, "code", c) < 0 ||
			  PyObject_SetAttrString(cls, "name", n) < 0;
		Py_XDECREF(c);
		Py_XDECREF(n);
		if (bad || PyModule_AddObjectRef(m, rfpy_errdefs[i].name, cls) < 0)
			goto fail;
	}
	Py_DECREF(dict);
	return 0;
fail:
	Py_DECREF(dict);
	return -1;
}

static PyTypeObject *add_type(PyObject *m, PyType_Spec *spec, const char *name)
{
	PyTypeObject *t = (PyTypeObject *)PyType_FromSpec(spec);
	if (t == NULL)
		return NULL;
	if (name != NULL && PyModule_AddObjectRef(m, name, (PyObject *)t) < 0) {
		Py_DECREF(t);
		return NULL;
	}
	return t;
}

PyMODINIT_FUNC PyInit__ringfetch(void)
{
	PyObject *m = PyModule_Create(&module_def);
	if (m == NULL)
		return NULL;
	if ((Pipeline_Type = add_type(m, &Pipeline_spec, "Pipeline")) == NULL ||
	    (Block_Type = add_type(m, &Block_spec, "Block")) == NULL ||
	    (View_Type = add_type(m, &View_spec, "View")) == NULL ||
	    (File_Type = add_type(m, &File_spec, "File")) == NULL || (Pin_Type = add_type(m, &Pin_spec, NULL)) == NULL ||
	    add_errors(m) < 0 || PyModule_AddStringConstant(m, "__version__", rf_version_string()) < 0 ||
	    PyModule_AddIntConstant(m, "HAVE_CUDA", RFPY_CUDA) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
