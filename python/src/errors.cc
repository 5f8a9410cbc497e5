// Exception classes: hexiseq.Error (a RuntimeError) with InvalidArgumentError (also ValueError),
// InfeasibleError, NotSupportedError, IoError (also OSError) and InternalError.
#include "errors.h"

#include <string>

namespace hexiseq::python {
namespace py = pybind11;
namespace {

const char* ClassName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "InvalidArgumentError";
    case ErrorCode::kInfeasible:
      return "InfeasibleError";
    case ErrorCode::kNotSupported:
      return "NotSupportedError";
    case ErrorCode::kIo:
      return "IoError";
    case ErrorCode::kInternal:
      return "InternalError";
  }
  return "Error";
}

void AddClass(py::module_& module, const char* name, py::handle bases) {
  const std::string qualified = std::string("hexiseq.") + name;
  PyObject* cls = PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  module.add_object(name, py::reinterpret_steal<py::object>(cls));
}

}  // namespace

void RegisterErrors(py::module_& module) {
  AddClass(module, "Error", PyExc_RuntimeError);
  py::handle base = module.attr("Error");
  AddClass(module, ClassName(ErrorCode::kInvalidArgument),
           py::make_tuple(base, py::handle(PyExc_ValueError)));
  AddClass(module, ClassName(ErrorCode::kInfeasible), base);
  AddClass(module, ClassName(ErrorCode::kNotSupported), base);
  AddClass(module, ClassName(ErrorCode::kIo), py::make_tuple(base, py::handle(PyExc_OSError)));
  AddClass(module, ClassName(ErrorCode::kInternal), base);
}

void RaiseError(const Error& error) {
  py::object cls = py::module_::import("hexiseq._core").attr(ClassName(error.code));
  PyErr_SetString(cls.ptr(), error.message.c_str());
  throw py::error_already_set();
}

}  // namespace hexiseq::python
