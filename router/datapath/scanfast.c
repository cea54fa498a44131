/* The section offsets of a well-formed message, in C: see router/datapath/scanfast.py for why, and
 * router/datapath/sections.py (`scan`) for what the offsets are. It follows `scan` step for step for
 * messages whose section descriptors are all small ulongs (what every client sends) and
 * answers None for anything else, malformed input included: `scan` then walks the message
 * itself, and gives the error its words. It never decides a message is bad.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Encoded size of each constructor's value, as sections._constructor_widths gives it. */
enum { V1 = -1, V4 = -4, DESCRIBED = -2, BAD = -3 };
static signed char width[256];

/* Section ranks (descriptor code - 0x70) and the constructors each may use (sections._ALLOWED). */
enum { MESSAGE_ANN = 2, PROPERTIES = 3, DATA = 5, SEQUENCE = 6, VALUE = 7, FOOTER = 8 };

static int allowed(int rank, unsigned char c)
{
    switch (rank) {
    case 0: /* header */
    case PROPERTIES:
        return c == 0x40 || c == 0x45 || c == 0xC0 || c == 0xD0;
    case SEQUENCE:
        return c == 0x45 || c == 0xC0 || c == 0xD0;
    case DATA:
        return c == 0xA0 || c == 0xB0;
    case VALUE:
        return 1;
    default: /* the maps: delivery and message annotations, application properties, footer */
        return c == 0x40 || c == 0xC1 || c == 0xD1;
    }
}

/* Offset just past the value at i, or -1 if it does not lie whole within [i, n) (sections._skip,
 * which also counts described values as pending rather than recursing). */
static Py_ssize_t skip(const unsigned char *b, Py_ssize_t i, Py_ssize_t n)
{
    Py_ssize_t pending = 1;
    while (pending) {
        if (i >= n)
            return -1;
        int w = width[b[i]];
        if (w >= 0) {
            i += 1 + w;
        } else if (w == V1) {
            if (i + 1 >= n)
                return -1;
            i += 2 + b[i + 1];
        } else if (w == V4) {
            if (i + 4 >= n)
                return -1;
            i += 5 + (((Py_ssize_t)b[i + 1] << 24) | (b[i + 2] << 16) | (b[i + 3] << 8) | b[i + 4]);
        } else if (w == DESCRIBED) {
            i += 1;
            pending += 1;
            continue;
        } else {
            return -1;
        }
        pending -= 1;
    }
    return i > n ? -1 : i;
}

static PyObject *offsets(const unsigned char *b, Py_ssize_t n)
{
    if (n == 0)
        Py_RETURN_NONE;
    Py_ssize_t i = 0, ma_start = -1, ma_end = -1, props_start = -1, props_end = -1,
               body_start = -1;
    int last = -1;
    while (i < n) {
        if (i + 3 >= n || b[i] != 0 || b[i + 1] != 0x53 || b[i + 2] < 0x70 || b[i + 2] > 0x78)
            Py_RETURN_NONE;
        int rank = b[i + 2] - 0x70;
        Py_ssize_t j = i + 3;
        if (rank <= last) {
            if (rank != last || rank > SEQUENCE || rank < DATA)
                Py_RETURN_NONE;
        } else if (last >= DATA && rank != FOOTER) {
            Py_RETURN_NONE;
        }
        if (!allowed(rank, b[j]))
            Py_RETURN_NONE;
        Py_ssize_t end;
        int w = width[b[j]];
        if (w >= 0)
            end = j + 1 + w;
        else if (w == V1)
            end = j + 1 < n ? j + 2 + b[j + 1] : -1;
        else
            end = skip(b, j, n);
        if (end < 0 || end > n)
            Py_RETURN_NONE;
        if (ma_start < 0 && rank >= MESSAGE_ANN) {
            ma_start = i;
            ma_end = rank == MESSAGE_ANN ? end : i;
        }
        if (rank == PROPERTIES) {
            props_start = i;
            props_end = end;
        } else if (body_start < 0 && rank >= DATA) {
            body_start = i;
        }
        last = rank;
        i = end;
    }
    if (ma_start < 0)
        ma_start = ma_end = n;
    if (body_start < 0)
        body_start = n;
    return Py_BuildValue("(nnnnn)", ma_start, ma_end, props_start, props_end, body_start);
}

static PyObject *section_offsets(PyObject *self, PyObject *buf)
{
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *found = offsets(view.buf, view.len);
    PyBuffer_Release(&view);
    return found;
}

static PyMethodDef methods[] = {
    {"section_offsets", section_offsets, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "router.scanfast", NULL, -1, methods,
};

PyMODINIT_FUNC PyInit_scanfast(void)
{
    /* The table sections._constructor_widths builds, the same codes. */
    for (int c = 0; c < 256; c++)
        width[c] = BAD;
    width[0x00] = DESCRIBED;
    for (int c = 0x40; c <= 0x45; c++)
        width[c] = 0;
    for (int c = 0x50; c <= 0x56; c++)
        width[c] = 1;
    width[0x60] = width[0x61] = 2;
    for (int c = 0x70; c <= 0x74; c++)
        width[c] = 4;
    for (int c = 0x80; c <= 0x84; c++)
        width[c] = 8;
    width[0x94] = width[0x98] = 16;
    width[0xA0] = width[0xA1] = width[0xA3] = width[0xC0] = width[0xC1] = width[0xE0] = V1;
    width[0xB0] = width[0xB1] = width[0xB3] = width[0xD0] = width[0xD1] = width[0xF0] = V4;
    return PyModule_Create(&module);
}
