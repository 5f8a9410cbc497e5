// Library errors as Python exceptions: each ErrorCode maps to one exception class of the
// `hexiseq` package (all subclasses of hexiseq.Error), raised with the library's message. The
// classes live in hexiseq._core; the torch extension raises the same classes through it.
#pragma once

#include <pybind11/pybind11.h>

#include <utility>

#include "spec/error.h"

namespace hexiseq::python {

// Creates hexiseq.Error and its subclasses in `module` (hexiseq._core).
void RegisterErrors(pybind11::module_& module);

// Sets the Python exception for `error` and throws pybind11::error_already_set.
// REQUIRES: the GIL is held.
[[noreturn]] void RaiseError(const Error& error);

// Returns the value or raises the error in Python. REQUIRES: the GIL is held.
template <class T>
T Unwrap(Result<T> result) {
  if (!result) RaiseError(result.error());
  return std::move(*result);
}
inline void Unwrap(const Result<void>& result) {
  if (!result) RaiseError(result.error());
}

// Runs fn() with the GIL released (for library calls that take long or block on other ranks)
// and returns its result. REQUIRES: fn does not touch Python objects.
template <class Fn>
auto WithoutGil(Fn&& fn) {
  pybind11::gil_scoped_release release;
  return fn();
}

}  // namespace hexiseq::python
