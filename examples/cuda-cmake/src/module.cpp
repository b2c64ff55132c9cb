// The CPython module kbx_cuda._kernels: thin wrappers that take device pointers and sizes as integers.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "kernels.h"

static PyObject* py_matmul(PyObject*, PyObject* args) {
  unsigned long long a, b, c, stream = 0;
  int M, N, K, tile = 0;
  if (!PyArg_ParseTuple(args, "KKKiii|iK", &a, &b, &c, &M, &N, &K, &tile, &stream)) return nullptr;
  return PyLong_FromLong(kbx_matmul_f16(a, b, c, M, N, K, tile, stream));
}

static PyObject* py_sum(PyObject*, PyObject* args) {
  unsigned long long x, out, stream = 0;
  long long n;
  if (!PyArg_ParseTuple(args, "KKL|K", &x, &out, &n, &stream)) return nullptr;
  return PyLong_FromLong(kbx_sum_f32(x, out, n, stream));
}

static PyObject* py_gelu(PyObject*, PyObject* args) {
  unsigned long long x, y, stream = 0;
  long long n;
  if (!PyArg_ParseTuple(args, "KKL|K", &x, &y, &n, &stream)) return nullptr;
  return PyLong_FromLong(kbx_gelu_f16(x, y, n, stream));
}

static PyObject* py_tiles(PyObject*, PyObject*) {
  return Py_BuildValue("((ii)(ii)(ii))", 64, 64, 128, 64, 128, 128);
}

static PyMethodDef methods[] = {
    {"matmul_f16", py_matmul, METH_VARARGS, "matmul_f16(a, b, c, M, N, K, tile=0, stream=0) -> cudaError_t"},
    {"sum_f32", py_sum, METH_VARARGS, "sum_f32(x, out, n, stream=0) -> cudaError_t (out += sum(x))"},
    {"gelu_f16", py_gelu, METH_VARARGS, "gelu_f16(x, y, n, stream=0) -> cudaError_t"},
    {"tiles", py_tiles, METH_NOARGS, "the (BM, BN) of each matmul tile choice"},
    {nullptr, nullptr, 0, nullptr}};

static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", "kbx-cuda kernels", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
