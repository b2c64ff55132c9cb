/* kbx_setup._kbx: the Python binding of the launcher kbuild generated for kernel "add". */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "kbuild_kernels.h"

static PyObject *kbx_add(PyObject *self, PyObject *args) {
  unsigned long long stream, x, y, out;
  unsigned int gx, gy, gz;
  int n;
  (void)self;
  if (!PyArg_ParseTuple(args, "KIIIKKKi:add", &stream, &gx, &gy, &gz, &x, &y, &out, &n))
    return NULL;
  CUresult r;
  Py_BEGIN_ALLOW_THREADS
  r = kbuild_add((CUstream)(uintptr_t)stream, gx, gy, gz, x, y, out, n);
  Py_END_ALLOW_THREADS
  if (r != CUDA_SUCCESS) {
    PyErr_Format(PyExc_RuntimeError, "%s (CUresult %d)", kbuild_last_error(), (int)r);
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyMethodDef kbx_methods[] = {
  {"add", kbx_add, METH_VARARGS, "add(stream, gx, gy, gz, x, y, out, n)"},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kbx_module = {
  PyModuleDef_HEAD_INIT, "_kbx", "Launcher of kbx_setup's ahead-of-time compiled Triton kernel.", -1, kbx_methods,
  NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kbx(void) { return PyModule_Create(&kbx_module); }
