/* kbx_demo._kbx: Python bindings of the launchers kbuild generated (kbuild_kernels.h).
 *
 * Each function takes the CUDA stream and device pointers as integers (torch:
 * torch.cuda.current_stream().cuda_stream and tensor.data_ptr()), the grid where the kernel
 * takes one, and the kernel's scalar arguments; kbx_demo/ops.py wraps them for torch tensors.
 * matmul_leaky_relu declares a grid expression (pyproject.toml): its launcher computes the grid
 * from the configuration shipped for the GPU it runs on (the tuner may ship another tile size
 * than the default), so it takes no grid. softmax and layernorm take theirs explicitly. No CUDA
 * library is linked: the launchers open libcuda.so.1 on first use. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "kbuild_kernels.h"

static PyObject *kbx_result(CUresult r) {
  if (r == CUDA_SUCCESS)
    Py_RETURN_NONE;
  PyErr_Format(PyExc_RuntimeError, "%s (CUresult %d)", kbuild_last_error(), (int)r);
  return NULL;
}

#define KBX_STREAM(s) ((CUstream)(uintptr_t)(s))

static PyObject *kbx_matmul_leaky_relu(PyObject *self, PyObject *args) {
  unsigned long long stream, a, b, c;
  int m, n, k, stride_am, stride_bk, stride_cm;
  (void)self;
  if (!PyArg_ParseTuple(args, "KKKKiiiiii:matmul_leaky_relu", &stream, &a, &b, &c, &m, &n, &k, &stride_am,
                        &stride_bk, &stride_cm))
    return NULL;
  CUresult r;
  Py_BEGIN_ALLOW_THREADS
  r = kbuild_matmul_leaky_relu(KBX_STREAM(stream), a, b, c, m, n, k, stride_am, stride_bk, stride_cm);
  Py_END_ALLOW_THREADS
  return kbx_result(r);
}

static PyObject *kbx_softmax(PyObject *self, PyObject *args) {
  unsigned long long stream, out, in;
  unsigned int gx, gy, gz;
  int in_row_stride, out_row_stride, n_cols;
  (void)self;
  if (!PyArg_ParseTuple(args, "KIIIKKiii:softmax", &stream, &gx, &gy, &gz, &out, &in, &in_row_stride, &out_row_stride,
                        &n_cols))
    return NULL;
  CUresult r;
  Py_BEGIN_ALLOW_THREADS
  r = kbuild_softmax(KBX_STREAM(stream), gx, gy, gz, out, in, in_row_stride, out_row_stride, n_cols);
  Py_END_ALLOW_THREADS
  return kbx_result(r);
}

static PyObject *kbx_layernorm(PyObject *self, PyObject *args) {
  unsigned long long stream, x, y, w, b, mean, rstd;
  unsigned int gx, gy, gz;
  int stride, n;
  float eps;
  (void)self;
  if (!PyArg_ParseTuple(args, "KIIIKKKKKKiif:layernorm", &stream, &gx, &gy, &gz, &x, &y, &w, &b, &mean, &rstd, &stride,
                        &n, &eps))
    return NULL;
  CUresult r;
  Py_BEGIN_ALLOW_THREADS
  r = kbuild_layernorm(KBX_STREAM(stream), gx, gy, gz, x, y, w, b, mean, rstd, stride, n, eps);
  Py_END_ALLOW_THREADS
  return kbx_result(r);
}

static PyMethodDef kbx_methods[] = {
  {"matmul_leaky_relu", kbx_matmul_leaky_relu, METH_VARARGS,
   "matmul_leaky_relu(stream, a, b, c, M, N, K, stride_am, stride_bk, stride_cm): the grid is computed"},
  {"softmax", kbx_softmax, METH_VARARGS,
   "softmax(stream, gx, gy, gz, out, inp, in_row_stride, out_row_stride, n_cols)"},
  {"layernorm", kbx_layernorm, METH_VARARGS,
   "layernorm(stream, gx, gy, gz, x, y, w, b, mean, rstd, stride, N, eps)"},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kbx_module = {
  PyModuleDef_HEAD_INIT, "_kbx", "Launchers of kbx_demo's ahead-of-time compiled Triton kernels.", -1, kbx_methods,
  NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kbx(void) {
  PyObject *m = PyModule_Create(&kbx_module);
  if (m != NULL && PyModule_AddIntConstant(m, "KERNEL_COUNT", KBUILD_KERNEL_COUNT) != 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
