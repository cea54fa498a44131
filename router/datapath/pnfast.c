/* The per-message Proton calls, without cffi's cost per call: see router/datapath/pnfast.py, which says what
 * each function does and is what runs when this is not compiled (ROUTERNET_PURE=1).
 *
 * A call through cffi releases and retakes the GIL, saves and restores errno and converts every
 * argument: ~85 ns, against ~25 ns for a C function of an extension module. A message through
 * one router took ~27 such calls. These functions do the sequences the data path always does
 * (take a whole message and advance; make, fill and advance a delivery; settle with an outcome)
 * in one call each, and the event loop's peek/type/link/delivery/pop in one per event.
 *
 * The functions are the ones python-qpid-proton's cffi module holds (its own build of Proton's C
 * engine, which every pn_*_t pointer in the router belongs to): their addresses come from
 * `ffi.addressof(lib, name)` at import, so this links against no Proton of its own and needs no
 * Proton headers. Pointers come and go as that module's cdata objects; cffi has no C API for
 * them, so the layout of its plain pointer cdata (unchanged since cffi 1.0) is declared below and
 * checked at import against objects cffi made: a cffi that differs stops the import with a clear
 * error rather than misread a pointer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct pn_collector_t pn_collector_t;
typedef struct pn_event_t pn_event_t;
typedef struct pn_link_t pn_link_t;
typedef struct pn_delivery_t pn_delivery_t;
typedef struct {
    size_t size;
    const char *start;
} pn_bytes_t;

/* cffi's CDataObject, as _cffi_backend.c declares it. */
typedef struct {
    PyObject_HEAD
    PyObject *c_type;
    char *c_data;
    PyObject *c_weakreflist;
} CData;

static struct {
    pn_event_t *(*collector_peek)(pn_collector_t *);
    int (*collector_pop)(pn_collector_t *);
    int (*event_type)(pn_event_t *);
    pn_link_t *(*event_link)(pn_event_t *);
    pn_delivery_t *(*event_delivery)(pn_event_t *);
    pn_delivery_t *(*link_current)(pn_link_t *);
    int (*link_credit)(pn_link_t *);
    int (*link_advance)(pn_link_t *);
    ssize_t (*link_recv)(pn_link_t *, char *, size_t);
    ssize_t (*link_send)(pn_link_t *, const char *, size_t);
    pn_delivery_t *(*delivery)(pn_link_t *, pn_bytes_t);
    int (*delivery_aborted)(pn_delivery_t *);
    int (*delivery_readable)(pn_delivery_t *);
    int (*delivery_partial)(pn_delivery_t *);
    size_t (*delivery_pending)(pn_delivery_t *);
    int (*delivery_settled)(pn_delivery_t *);
    uint64_t (*delivery_remote_state)(pn_delivery_t *);
    void (*delivery_update)(pn_delivery_t *, uint64_t);
    void (*delivery_settle)(pn_delivery_t *);
} pn;

static const char *const pn_names[] = {
    "pn_collector_peek", "pn_collector_pop", "pn_event_type", "pn_event_link",
    "pn_event_delivery", "pn_link_current", "pn_link_credit", "pn_link_advance",
    "pn_link_recv", "pn_link_send", "pn_delivery", "pn_delivery_aborted",
    "pn_delivery_readable", "pn_delivery_partial", "pn_delivery_pending",
    "pn_delivery_settled", "pn_delivery_remote_state", "pn_delivery_update",
    "pn_delivery_settle",
};

static PyTypeObject *cdata_type;
static PyObject *link_ctype, *delivery_ctype, *event_ctype;
static int PN_DELIVERY;
static uint64_t ACCEPTED, REJECTED, RELEASED, MODIFIED;

/* take()'s answers other than a message; router/datapath/pnfast.py names them. */
enum { NOT_CURRENT = 0, UNREADABLE = 1, SLOW = 2 };

static void *pointer(PyObject *o, PyObject *ctype)
{
    if (Py_TYPE(o) != cdata_type || ((CData *)o)->c_type != ctype) {
        PyErr_Format(PyExc_TypeError, "router.pnfast: expected a %R, got %R", ctype, o);
        return NULL;
    }
    void *p = ((CData *)o)->c_data;
    if (p == NULL)
        PyErr_SetString(PyExc_ValueError, "router.pnfast: NULL pointer");
    return p;
}

/* What cffi's new_simple_cdata does: a pointer cdata that owns nothing. */
static PyObject *wrap(void *p, PyObject *ctype)
{
    CData *cd = PyObject_New(CData, cdata_type);
    if (cd == NULL)
        return NULL;
    Py_INCREF(ctype);
    cd->c_type = ctype;
    cd->c_data = p;
    cd->c_weakreflist = NULL;
    return (PyObject *)cd;
}

/* A METH_FASTCALL function's argument count, with its usage as the error. */
static int arity(Py_ssize_t n, Py_ssize_t want, const char *usage)
{
    if (n == want)
        return 0;
    PyErr_SetString(PyExc_TypeError, usage);
    return -1;
}

/* An unsigned 64-bit argument (a tag, an outcome); -1 with an error set if it is not one. */
static int u64(PyObject *o, unsigned long long *out)
{
    *out = PyLong_AsUnsignedLongLong(o);
    return *out == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *next_event(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (arity(n, 2, "next_event(collector, pop)") < 0)
        return NULL;
    if (Py_TYPE(args[0]) != cdata_type || ((CData *)args[0])->c_data == NULL) {
        PyErr_SetString(PyExc_TypeError, "next_event: not a collector");
        return NULL;
    }
    pn_collector_t *coll = (pn_collector_t *)((CData *)args[0])->c_data;
    if (PyObject_IsTrue(args[1]))
        pn.collector_pop(coll);
    pn_event_t *ev = pn.collector_peek(coll);
    if (ev == NULL)
        Py_RETURN_NONE;
    int kind = pn.event_type(ev);
    PyObject *a, *b;
    if (kind == PN_DELIVERY) {
        a = wrap(pn.event_link(ev), link_ctype);
        b = a == NULL ? NULL : wrap(pn.event_delivery(ev), delivery_ctype);
    } else {
        a = wrap(ev, event_ctype);
        b = Py_None;
        Py_INCREF(b);
    }
    if (b == NULL) {
        Py_XDECREF(a);
        return NULL;
    }
    PyObject *k = PyLong_FromLong(kind);
    if (k == NULL) {
        Py_DECREF(a);
        Py_DECREF(b);
        return NULL;
    }
    PyObject *t = PyTuple_New(3);
    if (t == NULL) {
        Py_DECREF(k);
        Py_DECREF(a);
        Py_DECREF(b);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, k);
    PyTuple_SET_ITEM(t, 1, a);
    PyTuple_SET_ITEM(t, 2, b);
    return t;
}

static PyObject *take(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (arity(n, 2, "take(link, delivery)") < 0)
        return NULL;
    pn_link_t *link = pointer(args[0], link_ctype);
    if (link == NULL)
        return NULL;
    pn_delivery_t *d = pointer(args[1], delivery_ctype);
    if (d == NULL)
        return NULL;
    if (pn.link_current(link) != d)
        return PyLong_FromLong(NOT_CURRENT);
    if (pn.delivery_aborted(d))
        return PyLong_FromLong(SLOW);
    if (!pn.delivery_readable(d))
        return PyLong_FromLong(UNREADABLE);
    if (pn.delivery_partial(d))
        return PyLong_FromLong(SLOW);
    size_t pending = pn.delivery_pending(d);
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)pending);
    if (data == NULL)
        return NULL;
    ssize_t got = pn.link_recv(link, PyBytes_AS_STRING(data), pending);
    if (got < 0)
        got = 0; /* an empty transfer reads as PN_EOS */
    if ((size_t)got != pending && _PyBytes_Resize(&data, got) < 0)
        return NULL;
    pn.link_advance(link);
    return data;
}

static PyObject *settled(PyObject *self, PyObject *d)
{
    pn_delivery_t *p = pointer(d, delivery_ctype);
    if (p == NULL)
        return NULL;
    return PyBool_FromLong(pn.delivery_settled(p));
}

static PyObject *credit(PyObject *self, PyObject *link)
{
    pn_link_t *p = pointer(link, link_ctype);
    if (p == NULL)
        return NULL;
    return PyLong_FromLong(pn.link_credit(p));
}

static PyObject *send(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (arity(n, 5, "send(link, tag, data, advance, settle)") < 0)
        return NULL;
    pn_link_t *link = pointer(args[0], link_ctype);
    if (link == NULL)
        return NULL;
    unsigned long long tag;
    if (u64(args[1], &tag) < 0)
        return NULL;
    int advance = PyObject_IsTrue(args[3]), settle = PyObject_IsTrue(args[4]);
    if (advance < 0 || settle < 0)
        return NULL;
    Py_buffer data;
    if (PyObject_GetBuffer(args[2], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    char tag_bytes[8];
    for (int i = 0; i < 8; i++)
        tag_bytes[i] = (char)(tag >> (8 * i)); /* little-endian, as the tags always were */
    pn_bytes_t t = {8, tag_bytes};
    pn_delivery_t *d = pn.delivery(link, t);
    pn.link_send(link, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    if (advance)
        pn.link_advance(link);
    if (settle)
        pn.delivery_settle(d);
    return wrap(d, delivery_ctype);
}

static PyObject *outcome(PyObject *self, PyObject *d)
{
    pn_delivery_t *p = pointer(d, delivery_ctype);
    if (p == NULL)
        return NULL;
    uint64_t state = pn.delivery_remote_state(p);
    if (state != ACCEPTED && state != REJECTED && state != RELEASED && state != MODIFIED)
        state = pn.delivery_settled(p) ? ACCEPTED : 0;
    return PyLong_FromUnsignedLongLong(state);
}

static PyObject *settle(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    if (arity(n, 2, "settle(delivery, state)") < 0)
        return NULL;
    pn_delivery_t *d = pointer(args[0], delivery_ctype);
    if (d == NULL)
        return NULL;
    unsigned long long state;
    if (u64(args[1], &state) < 0)
        return NULL;
    if (state)
        pn.delivery_update(d, state);
    pn.delivery_settle(d);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"next_event", (PyCFunction)(void (*)(void))next_event, METH_FASTCALL, NULL},
    {"take", (PyCFunction)(void (*)(void))take, METH_FASTCALL, NULL},
    {"settled", settled, METH_O, NULL},
    {"credit", credit, METH_O, NULL},
    {"send", (PyCFunction)(void (*)(void))send, METH_FASTCALL, NULL},
    {"outcome", outcome, METH_O, NULL},
    {"settle", (PyCFunction)(void (*)(void))settle, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "router.pnfast", NULL, -1, methods,
};

static int attr_u64(PyObject *lib, const char *name, uint64_t *out)
{
    PyObject *v = PyObject_GetAttrString(lib, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

/* ffi.cast("uintptr_t", cdata) as a C pointer. */
static void *address_of(PyObject *ffi, PyObject *cdata)
{
    PyObject *as_uintptr = PyObject_CallMethod(ffi, "cast", "sO", "uintptr_t", cdata);
    if (as_uintptr == NULL)
        return NULL;
    PyObject *as_int = PyNumber_Long(as_uintptr);
    Py_DECREF(as_uintptr);
    if (as_int == NULL)
        return NULL;
    void *p = PyLong_AsVoidPtr(as_int);
    Py_DECREF(as_int);
    return p;
}

/* A cdata of `ctype` (a string) from ffi.cast, checked to hold `address` where CData says. */
static PyObject *cast_checked(PyObject *ffi, const char *ctype, uintptr_t address)
{
    PyObject *v = PyObject_CallMethod(ffi, "cast", "sK", ctype, (unsigned long long)address);
    if (v == NULL)
        return NULL;
    if (Py_TYPE(v) != cdata_type || ((CData *)v)->c_data != (char *)address) {
        Py_DECREF(v);
        PyErr_SetString(PyExc_ImportError,
                        "router.pnfast: this cffi lays out its pointer objects differently "
                        "from what router/datapath/pnfast.c knows; set ROUTERNET_PURE=1 to run the "
                        "source");
        return NULL;
    }
    return v;
}

static PyObject *ctype_of(PyObject *ffi, const char *name)
{
    PyObject *probe = cast_checked(ffi, name, 0x5a5a5a50);
    if (probe == NULL)
        return NULL;
    PyObject *ct = ((CData *)probe)->c_type;
    Py_INCREF(ct);
    Py_DECREF(probe);
    return ct;
}

PyMODINIT_FUNC PyInit_pnfast(void)
{
    PyObject *cproton = PyImport_ImportModule("cproton_ffi");
    if (cproton == NULL)
        return NULL;
    PyObject *ffi = PyObject_GetAttrString(cproton, "ffi");
    PyObject *lib = PyObject_GetAttrString(cproton, "lib");
    Py_DECREF(cproton);
    PyObject *m = NULL;
    if (ffi == NULL || lib == NULL)
        goto done;
    /* The type of a plain pointer cdata, from one cffi makes. */
    PyObject *probe = PyObject_CallMethod(ffi, "cast", "sK", "void *", 0x5a5a5a50ULL);
    if (probe == NULL)
        goto done;
    cdata_type = Py_TYPE(probe);
    Py_INCREF(cdata_type);
    Py_DECREF(probe);
    if (!(link_ctype = ctype_of(ffi, "pn_link_t *")) ||
        !(delivery_ctype = ctype_of(ffi, "pn_delivery_t *")) ||
        !(event_ctype = ctype_of(ffi, "pn_event_t *")))
        goto done;
    void **slots = (void **)&pn;
    for (size_t i = 0; i < sizeof(pn_names) / sizeof(pn_names[0]); i++) {
        PyObject *addr = PyObject_CallMethod(ffi, "addressof", "Os", lib, pn_names[i]);
        if (addr == NULL)
            goto done;
        slots[i] = address_of(ffi, addr);
        Py_DECREF(addr);
        if (slots[i] == NULL)
            goto done;
    }
    uint64_t kind;
    if (attr_u64(lib, "PN_DELIVERY", &kind) < 0 || attr_u64(lib, "PN_ACCEPTED", &ACCEPTED) < 0 ||
        attr_u64(lib, "PN_REJECTED", &REJECTED) < 0 ||
        attr_u64(lib, "PN_RELEASED", &RELEASED) < 0 ||
        attr_u64(lib, "PN_MODIFIED", &MODIFIED) < 0)
        goto done;
    PN_DELIVERY = (int)kind;
    /* A cdata made here must read back in cffi as the pointer it holds. */
    PyObject *made = wrap((void *)0x5a5a5a50, delivery_ctype);
    if (made == NULL)
        goto done;
    void *back = address_of(ffi, made);
    Py_DECREF(made);
    if (PyErr_Occurred())
        goto done;
    if (back != (void *)0x5a5a5a50) {
        PyErr_SetString(PyExc_ImportError, "router.pnfast: cffi does not read back its pointers");
        goto done;
    }
    m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddIntConstant(m, "NOT_CURRENT", NOT_CURRENT) < 0 ||
                      PyModule_AddIntConstant(m, "UNREADABLE", UNREADABLE) < 0 ||
                      PyModule_AddIntConstant(m, "SLOW", SLOW) < 0))
        Py_CLEAR(m);
done:
    Py_XDECREF(ffi);
    Py_XDECREF(lib);
    return m;
}
