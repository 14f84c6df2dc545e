// The compiled part of the npu adapter's per-op path (issue 20).
//
// For a plain op (no view, no host-only run, no value read back, no convolution, numerics
// "cpu"), the Python fallback hands its arguments to run(): this builds the host views of the
// npu arguments, calls the op's CPU kernel through the dispatcher and wraps every fresh result
// as an npu tensor whose storage's Python object holds the result's CPU storage as attribute
// ``_npu`` -- what msprof_py/adapter/tensors.py's host_view and adopt do in Python, in one
// call. In-place and out= ops return their written arguments and name those the kernel
// resized. Device memory, the launch and recording are done by Python (backend._finish_native)
// the first time an op meets its shapes, dtypes and attribute values; Python then teaches run()
// that combination's launch (learn()), and later calls do it here: device memory for the fresh
// outputs from the caching allocator (hold), then the engine's launch_kernel for each kernel,
// the same calls in the same order (the fast launch). Any state the learned launch does not
// cover (a graph capture, L2 modelling, a new compile-cache epoch, recording without the
// task fields) sends the call back to Python's path.
//
// run() returns None, having changed nothing, whenever an argument is outside the plain case
// (the Python path then runs the op as before); when the CPU kernel raises, it returns None
// too, and the Python path runs the op again for the real error (CPU kernels check their
// arguments before they write).
#include <ATen/ScalarOps.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <deque>
#include <unordered_map>
#include <vector>

namespace {

//: bumped whenever run()'s contract with msprof_py/adapter/backend.py changes
constexpr int kAbiVersion = 5;

enum class Kind { kOther, kTensor, kOptionalTensor, kTensorList };

struct OpEntry {
  c10::OperatorHandle handle;
  std::vector<Kind> kinds;
  std::vector<c10::TypePtr> types;
  std::vector<std::optional<c10::IValue>> defaults;
  //: argument names (interned): keyword-only arguments come by name
  std::vector<PyObject*> names;
  //: per argument: the op writes it (in place, out=)
  std::vector<bool> written;
  //: per return: the position of the written argument it is, or -1 for a fresh tensor
  std::vector<int64_t> return_aliases;
  //: the op takes a Python number for a Tensor argument (add, mul ...): wrap it as torch does
  bool wraps_numbers;
  //: positions of the arguments that may be compile-cache attributes (attribute_slots)
  std::vector<int64_t> attr_slots;
};

//: what run() does for a learned (op, shapes, dtypes, attributes): see learn()
struct FastLaunch {
  //: ((cost, op_type), ...) of the kernels, in launch order
  py::object kernels;
  //: the task-record fields of the launch (None: not known, recording takes Python's path)
  py::object fields;
  //: the op's task name and device-memory tag ("aten::mul")
  py::object name;
  //: the compile cache and its epoch the launch was learned in
  py::object compiled;
  int64_t epoch;
};

//: learned launches by key (see fast_key); cleared when it holds kFastLimit
std::unordered_map<std::string, FastLaunch> fast_launches;
constexpr size_t kFastLimit = 100000;
bool fast_enabled = true;
//: callable(exc) raising torch's out-of-memory error for the device's (set by init())
py::object on_oom;
//: the device's out-of-memory error type (set by init())
py::object device_oom;

//: a deque: entries keep their address while another thread registers an op (a CPU kernel
//: may run Python, which may let another thread take the GIL)
std::deque<OpEntry> ops;
PyObject* npu_name = nullptr;  // "_npu"
PyObject* fmt_name = nullptr;  // "_npu_fmt"
const c10::Device npu_device(c10::DeviceType::PrivateUse1, 0);
//: the allocator of the npu storages torch's Python backend makes (set by init())
c10::Allocator* npu_allocator = nullptr;

// Optional attribute lookup without raising on a miss (1: found, 0: missing, -1: error).
int lookup(PyObject* obj, PyObject* name, PyObject** out) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyObject_GetOptionalAttr(obj, name, out);
#else
  return _PyObject_LookupAttr(obj, name, out);
#endif
}

Kind kind_of(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return Kind::kTensor;
  if (auto opt = type->cast<c10::OptionalType>()) {
    if (opt->getElementType()->kind() == c10::TypeKind::TensorType) return Kind::kOptionalTensor;
  }
  if (auto list = type->cast<c10::ListType>()) {
    if (list->getElementType()->kind() == c10::TypeKind::TensorType) return Kind::kTensorList;
  }
  return Kind::kOther;
}

// True when values of ``type`` may hold a tensor, a device or a storage somewhere (Tensor?[],
// Device? ...): such an argument is outside the plain case (the Python path maps npu devices to the
// host's).
bool holds_tensors_or_devices(const c10::TypePtr& type) {
  const auto kind = type->kind();
  if (kind == c10::TypeKind::TensorType || kind == c10::TypeKind::DeviceObjType ||
      kind == c10::TypeKind::StorageType) {
    return true;
  }
  for (const auto& contained : type->containedTypes()) {
    if (holds_tensors_or_devices(contained)) return true;
  }
  return false;
}

// Register an op overload for the native path; its id, or -1 when its schema is outside the
// plain case (a view, a list of optional tensors, a device or storage argument, a non-tensor
// return). ``written`` are the positions of the arguments it writes (in-place and out=
// ops), ``return_aliases`` for each return the position of the written argument it is, or -1
// for a fresh tensor (as backend.OpPlan computes them).
int register_op(const std::string& name, const std::string& overload, bool wraps_numbers,
                const std::vector<int64_t>& written, const std::vector<int64_t>& return_aliases,
                const std::vector<int64_t>& attr_slots) {
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle.has_value()) return -1;
  const auto& schema = handle->schema();
  const size_t count = schema.arguments().size();
  if (return_aliases.size() != schema.returns().size()) return -1;
  OpEntry entry{*handle, {}, {}, {}, {},
                std::vector<bool>(count, false), {}, wraps_numbers, attr_slots};
  for (int64_t position : written) {
    if (position < 0 || static_cast<size_t>(position) >= count) return -1;
    entry.written[position] = true;
  }
  for (size_t i = 0; i < count; ++i) {
    const auto& arg = schema.arguments()[i];
    const auto* alias = arg.alias_info();
    if (alias != nullptr && !(alias->isWrite() && entry.written[i])) return -1;
    Kind kind = kind_of(arg.type());
    if (kind == Kind::kOther && holds_tensors_or_devices(arg.type())) return -1;
    if (entry.written[i] && kind == Kind::kOther) return -1;
    entry.kinds.push_back(kind);
    entry.types.push_back(arg.type());
    entry.defaults.push_back(arg.default_value());
  }
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const auto& ret = schema.returns()[r];
    const int64_t alias = return_aliases[r];
    if (alias >= 0) {
      if (static_cast<size_t>(alias) >= count || !entry.written[alias]) return -1;
    } else if (ret.alias_info() != nullptr) {
      return -1;
    }
    Kind kind = kind_of(ret.type());
    if (kind != Kind::kTensor && kind != Kind::kTensorList) return -1;
    entry.return_aliases.push_back(alias);
  }
  // interned once the schema is accepted (an op refused above leaks no names)
  for (const auto& arg : schema.arguments()) {
    entry.names.push_back(PyUnicode_InternFromString(arg.name().c_str()));
  }
  ops.push_back(std::move(entry));
  return static_cast<int>(ops.size()) - 1;
}

// The arguments of one call, turned into the CPU kernel's stack.
class Unwrapper {
 public:
  //: an npu tensor the op writes, its host view, and the backing storage the view had
  struct Written {
    PyObject* target;
    at::Tensor view;
    const c10::StorageImpl* backing;
  };

  explicit Unwrapper(size_t count) : slots(count, nullptr) {}

  //: every npu argument in order of appearance (borrowed: the caller's tuple holds them)
  std::vector<PyObject*> npu_inputs;
  //: the Python value given for each schema slot (nullptr: its default)
  std::vector<PyObject*> slots;
  std::vector<Written> written;
  //: an npu argument is held in a private format (its storage has ``_npu_fmt``)
  bool formatted = false;

  // Append the host value of Python argument ``obj`` for schema slot ``index``; false when it
  // is outside the plain case.
  bool push(const OpEntry& entry, size_t index, PyObject* obj, torch::jit::Stack& stack) {
    slots[index] = obj;
    const Kind kind = entry.kinds[index];
    // as in the Python path, written tensors are checked for a new size or storage after the
    // call; written lists (foreach ops) are not
    writing_ = entry.written[index] && (kind == Kind::kTensor || kind == Kind::kOptionalTensor);
    switch (kind) {
      case Kind::kTensor:
        return push_tensor(entry, obj, false, stack);
      case Kind::kOptionalTensor:
        return push_tensor(entry, obj, true, stack);
      case Kind::kTensorList:
        return push_list(obj, stack);
      case Kind::kOther:
        break;
    }
    writing_ = false;
    if (THPVariable_Check(obj) || THPDevice_Check(obj)) return false;
    try {
      stack.emplace_back(torch::jit::toIValue(obj, entry.types[index]));
    } catch (const std::exception&) {
      PyErr_Clear();
      return false;
    }
    return true;
  }

 private:
  std::unordered_map<c10::TensorImpl*, at::Tensor> seen_;
  //: the argument being pushed is one the op writes
  bool writing_ = false;

  void note_written(PyObject* obj, const at::Tensor& host) {
    if (writing_) written.push_back({obj, host, host.storage().unsafeGetStorageImpl()});
  }

  bool push_tensor(const OpEntry& entry, PyObject* obj, bool optional, torch::jit::Stack& stack) {
    if (obj == Py_None) {
      if (!optional) return false;
      stack.emplace_back();
      return true;
    }
    if (!THPVariable_Check(obj)) {
      // torch's boxed convention hands wrapped numbers (the 7 in ``x % 7``) over as Python
      // numbers: wrap them again as the Python argument parser does
      if (!entry.wraps_numbers || optional) return false;
      c10::Scalar scalar;
      if (PyBool_Check(obj)) {
        scalar = c10::Scalar(obj == Py_True);
      } else if (PyLong_CheckExact(obj)) {
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow != 0 || (value == -1 && PyErr_Occurred())) {
          PyErr_Clear();
          return false;
        }
        scalar = c10::Scalar(static_cast<int64_t>(value));
      } else if (PyFloat_CheckExact(obj)) {
        scalar = c10::Scalar(PyFloat_AS_DOUBLE(obj));
      } else {
        return false;
      }
      stack.emplace_back(at::native::wrapped_scalar_tensor(scalar));
      return true;
    }
    at::Tensor host;
    if (!host_value(obj, host)) return false;
    stack.emplace_back(std::move(host));
    return true;
  }

  bool push_list(PyObject* obj, torch::jit::Stack& stack) {
    if (!PyList_Check(obj) && !PyTuple_Check(obj)) return false;
    PyObject* items = PySequence_Fast(obj, "");
    if (items == nullptr) {
      PyErr_Clear();
      return false;
    }
    const Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    PyObject** values = PySequence_Fast_ITEMS(items);
    c10::List<at::Tensor> list;
    list.reserve(count);
    bool ok = true;
    for (Py_ssize_t i = 0; i < count && ok; ++i) {
      at::Tensor host;
      ok = THPVariable_Check(values[i]) && host_value(values[i], host);
      if (ok) list.push_back(std::move(host));
    }
    Py_DECREF(items);
    if (ok) stack.emplace_back(std::move(list));
    return ok;
  }

  // The host tensor standing for tensor argument ``obj``: the host view of an npu tensor (the
  // same view for the same tensor twice: CPU kernels check aliasing by identity), or a 0-dim
  // CPU tensor as it is (a private format changes no value: the host view reads the logical
  // layout). False for anything else (a CPU tensor with dimensions beside npu ones is an
  // error the Python path reports; conjugate and negative bits, quantized tensors, tensors
  // made outside msprof-py).
  bool host_value(PyObject* obj, at::Tensor& host) {
    const at::Tensor& t = THPVariable_Unpack(obj);
    const auto device = t.device().type();
    if (device == c10::DeviceType::CPU) {
      if (t.dim() > 0 || writing_) return false;
      host = t;
      return true;
    }
    if (device != c10::DeviceType::PrivateUse1 || t.is_conj() || t.is_neg() ||
        t.is_quantized()) {
      return false;
    }
    npu_inputs.push_back(obj);
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    auto found = seen_.find(impl);
    if (found != seen_.end()) {
      host = found->second;
      note_written(obj, host);
      return true;
    }
    if (!t.has_storage()) return false;
    PyObject* storage = THPStorage_Wrap(t.storage());
    if (storage == nullptr) {
      PyErr_Clear();
      return false;
    }
    PyObject* backing = nullptr;
    PyObject* fmt = nullptr;
    const bool ok = lookup(storage, npu_name, &backing) == 1 &&
                    lookup(storage, fmt_name, &fmt) >= 0 && THPStorage_Check(backing);
    Py_DECREF(storage);
    if (fmt != nullptr) formatted = true;  // held in a private format: Python converts it
    Py_XDECREF(fmt);
    if (!ok) {
      Py_XDECREF(backing);
      PyErr_Clear();
      return false;
    }
    const c10::Storage& bytes = THPStorage_Unpack(backing);
    const bool on_cpu = bytes.device_type() == c10::DeviceType::CPU;
    if (on_cpu) {
      host = at::detail::make_tensor<c10::TensorImpl>(
          c10::Storage(bytes), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
      host.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(),
                                                        t.storage_offset());
      seen_.emplace(impl, host);
      note_written(obj, host);
    }
    Py_DECREF(backing);
    return on_cpu;
  }
};

// A new npu tensor holding CPU tensor ``result``'s values: sizes, strides and offset of
// ``result``, a storage without bytes whose Python object keeps ``result``'s storage as
// ``_npu``. Its device memory comes from Python (tensors.attach_memory) or the fast launch,
// which gets the storage's Python object in ``npu_storage_out`` when it is not null.
PyObject* adopt(const at::Tensor& result, PyObject** npu_storage_out = nullptr) {
  if (npu_allocator == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "msprof_hot_path: init() was not called");
    return nullptr;
  }
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, npu_device),
                       npu_allocator, true);
  at::Tensor out = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), result.dtype());
  c10::TensorImpl* impl = out.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(result.sizes(), result.strides(), result.storage_offset());
  if (result.is_conj()) impl->_set_conj(true);
  if (result.is_neg()) impl->_set_neg(true);
  PyObject* npu_storage = THPStorage_Wrap(out.storage());
  if (npu_storage == nullptr) return nullptr;
  PyObject* backing = THPStorage_Wrap(result.storage());
  const int set = backing == nullptr ? -1 : PyObject_SetAttr(npu_storage, npu_name, backing);
  Py_XDECREF(backing);
  if (set != 0) {
    Py_DECREF(npu_storage);
    return nullptr;
  }
  if (npu_storage_out != nullptr) {
    *npu_storage_out = npu_storage;
  } else {
    Py_DECREF(npu_storage);
  }
  return THPVariable_Wrap(std::move(out));
}

// The results of one call, as the Python path returns and launches them.
class Results {
 public:
  //: every output tensor in order (None for an undefined one), written arguments included
  py::list outputs;
  //: the npu tensors adopt() made (they need device memory)
  py::list fresh;
  //: for each of ``fresh``: its storage's Python object and the bytes of its backing
  std::vector<std::pair<py::object, int64_t>> storages;

  // The Python value of fresh result ``value`` (a tensor or a list of them); nullptr on error.
  PyObject* adopt_value(const c10::IValue& value) {
    if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      if (!t.defined()) {
        return append(outputs, Py_None) ? Py_NewRef(Py_None) : nullptr;
      }
      PyObject* storage = nullptr;
      PyObject* out = adopt(t, &storage);
      if (out == nullptr) return nullptr;
      storages.emplace_back(py::reinterpret_steal<py::object>(storage),
                            static_cast<int64_t>(t.storage().nbytes()));
      if (!append(outputs, out) || !append(fresh, out)) {
        Py_DECREF(out);
        return nullptr;
      }
      return out;
    }
    const auto list = value.toTensorList();
    PyObject* wrapped = PyList_New(0);
    if (wrapped == nullptr) return nullptr;
    for (const at::Tensor t : list) {
      PyObject* out = adopt_value(c10::IValue(t));
      if (out == nullptr || PyList_Append(wrapped, out) != 0) {
        Py_XDECREF(out);
        Py_DECREF(wrapped);
        return nullptr;
      }
      Py_DECREF(out);
    }
    return wrapped;
  }

  // The Python value of a result that is written argument ``target``: the argument itself.
  PyObject* written_value(PyObject* target) {
    if (target == nullptr) return Py_NewRef(Py_None);
    if (THPVariable_Check(target)) {
      if (!append(outputs, target)) return nullptr;
    } else if (PyList_Check(target) || PyTuple_Check(target)) {
      PyObject* items = PySequence_Fast(target, "");
      if (items == nullptr) return nullptr;
      bool ok = true;
      for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items) && ok; ++i) {
        ok = append(outputs, PySequence_Fast_GET_ITEM(items, i));
      }
      Py_DECREF(items);
      if (!ok) return nullptr;
    }
    return Py_NewRef(target);
  }

 private:
  static bool append(py::list& list, PyObject* value) {
    return PyList_Append(list.ptr(), value) == 0;
  }
};

// ---- the fast launch ----------------------------------------------------------------------

PyObject* s_capture = nullptr;
PyObject* s_npu = nullptr;
PyObject* s_l2 = nullptr;
PyObject* s_compiled = nullptr;
PyObject* s_epoch = nullptr;
PyObject* s_engine = nullptr;
PyObject* s_bus = nullptr;
PyObject* s_active = nullptr;
PyObject* s_stream = nullptr;
PyObject* s_stream_id = nullptr;
PyObject* s_memory = nullptr;
PyObject* s_hold = nullptr;
PyObject* s_launch_kernel = nullptr;
PyObject* s_attrs = nullptr;
PyObject* s_npu_mem = nullptr;

// Attribute ``name`` (an interned str) of ``obj``; throws the Python error.
py::object get(py::handle obj, PyObject* name) {
  PyObject* value = PyObject_GetAttr(obj.ptr(), name);
  if (value == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(value);
}

void put(std::string& key, int64_t value) {
  key.append(reinterpret_cast<const char*>(&value), sizeof value);
}

void put_tensor(std::string& key, const at::Tensor& t) {
  put(key, static_cast<int64_t>(t.scalar_type()));
  put(key, t.dim());
  for (const int64_t size : t.sizes()) put(key, size);
}

// The key a launch is learned by: the op, the dtype and sizes of every npu input and output
// (what the Python path's cost-cache key holds, formats being plain here), and the values at
// the op's attribute slots as compile_cache.attributes_at takes them (the compile-cache key).
// False when an attribute is one the key does not hold (a str, a dtype, a list: Python's path).
bool fast_key(int op_id, const OpEntry& entry, const std::vector<PyObject*>& inputs,
              const py::list& outputs, const py::tuple& args, std::string& key) {
  key.reserve(16 * (inputs.size() + outputs.size() + entry.attr_slots.size()) + 32);
  put(key, op_id);
  for (PyObject* obj : inputs) put_tensor(key, THPVariable_Unpack(obj));
  put(key, -1);
  for (const auto item : outputs) {
    if (item.is_none()) {
      put(key, -2);
    } else if (THPVariable_Check(item.ptr())) {
      put_tensor(key, THPVariable_Unpack(item.ptr()));
    } else {
      return false;
    }
  }
  put(key, -1);
  const size_t count = args.size();
  for (const int64_t slot : entry.attr_slots) {
    if (static_cast<size_t>(slot) >= count) break;
    PyObject* a = PyTuple_GET_ITEM(args.ptr(), slot);
    if (THPVariable_Check(a)) continue;
    if (a == Py_None) {
      put(key, 1);
    } else if (PyBool_Check(a)) {
      put(key, 2);
      put(key, a == Py_True);
    } else if (PyLong_Check(a)) {
      int overflow = 0;
      const long long value = PyLong_AsLongLongAndOverflow(a, &overflow);
      if (overflow != 0 || (value == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return false;
      }
      put(key, 3);
      put(key, value);
    } else if (PyUnicode_Check(a) || THPDtype_Check(a) || PyList_Check(a) || PyTuple_Check(a)) {
      return false;
    }  // anything else (a float, a complex number ...) is no attribute, as in Python
  }
  return true;
}

// Do learned launch ``fast`` for this call: device memory for each fresh output, then each
// kernel, as backend._finish_native does. False, with nothing done, when the state is outside
// what was learned.
bool fast_launch(const FastLaunch& fast, py::handle state, const Results& results) {
  if (!get(state, s_capture).is_none()) return false;
  const py::object npu = get(state, s_npu);
  if (!get(npu, s_l2).is_none()) return false;
  const py::object compiled = get(state, s_compiled);
  if (!compiled.is(fast.compiled) || get(compiled, s_epoch).cast<int64_t>() != fast.epoch) {
    return false;
  }
  const py::object engine = get(npu, s_engine);
  const int recording = PyObject_IsTrue(get(get(engine, s_bus), s_active).ptr());
  if (recording < 0) throw py::error_already_set();
  if (recording && fast.fields.is_none()) return false;
  const py::object stream = get(state, s_stream);
  if (!results.storages.empty()) {
    const py::object stream_id = get(stream, s_stream_id);
    const py::object hold = get(get(npu, s_memory), s_hold);
    for (const auto& [storage, nbytes] : results.storages) {
      py::object held;
      try {
        held = hold(nbytes, stream_id, fast.name);
      } catch (py::error_already_set& error) {
        if (error.matches(device_oom)) on_oom(error.value());  // raises torch's error
        throw;
      }
      if (PyObject_SetAttr(storage.ptr(), s_npu_mem, held.ptr()) != 0) {
        throw py::error_already_set();
      }
    }
  }
  const py::object launch = get(engine, s_launch_kernel);
  const py::object attrs = recording ? get(compiled, s_attrs) : py::none();
  for (const auto kernel : fast.kernels) {
    const py::tuple pair = py::reinterpret_borrow<py::tuple>(kernel);
    if (recording) {
      launch(stream, pair[0], fast.name, pair[1], fast.fields, attrs);
    } else {
      launch(stream, pair[0], fast.name, pair[1]);
    }
  }
  return true;
}

// Teach run() the launch of key ``key`` (from run()'s result): ``kernels`` ((cost, op_type),
// ...), the task-record ``fields`` (or None), the op's ``name``, and the compile cache and
// epoch it was made in.
void learn(py::bytes key, py::tuple kernels, py::object fields, py::object name,
           py::object compiled, int64_t epoch) {
  if (fast_launches.size() >= kFastLimit) fast_launches.clear();
  fast_launches[std::string(key)] = FastLaunch{kernels, fields, name, compiled, epoch};
}

// Turn the fast launch on or off (off: every call returns to Python's path, as before).
void set_fast(bool enabled) {
  fast_enabled = enabled;
  if (!enabled) fast_launches.clear();
}

// Run op ``op_id`` on the host views of ``args`` and ``kwargs`` (torch's boxed convention:
// keyword-only arguments by name, trailing defaults left out) for adapter state ``state``.
// Returns [result] when the launch was learned and done here (fast_launch); else (result, npu
// inputs, outputs, fresh outputs, stale written tensors as (tensor, host view) pairs, whether
// an npu argument is held in a private format, the key to learn() this launch by or None);
// or None when the call is outside the plain case or the CPU kernel raised.
py::object run(int op_id, py::tuple args, py::dict kwargs, py::handle state) {
  const OpEntry& entry = ops.at(static_cast<size_t>(op_id));
  const size_t given = static_cast<size_t>(args.size());
  const size_t count = entry.kinds.size();
  if (given > count) return py::none();
  Unwrapper unwrap(count);
  torch::jit::Stack stack;
  stack.reserve(count);
  for (size_t i = 0; i < given; ++i) {
    if (!unwrap.push(entry, i, args[i].ptr(), stack)) return py::none();
  }
  size_t by_name = 0;
  for (size_t i = given; i < count; ++i) {
    PyObject* value = kwargs.empty() ? nullptr : PyDict_GetItem(kwargs.ptr(), entry.names[i]);
    if (value != nullptr) {
      ++by_name;
      if (!unwrap.push(entry, i, value, stack)) return py::none();
    } else if (entry.defaults[i].has_value()) {
      stack.push_back(*entry.defaults[i]);
    } else {
      return py::none();
    }
  }
  if (by_name != kwargs.size()) return py::none();  // a name the schema does not have
  try {
    entry.handle.callBoxed(stack);
  } catch (const std::exception&) {
    PyErr_Clear();
    return py::none();
  }
  Results results;
  const size_t returns = stack.size();
  auto value_of = [&](size_t r) -> PyObject* {
    const int64_t alias = entry.return_aliases[r];
    return alias >= 0 ? results.written_value(unwrap.slots[alias])
                      : results.adopt_value(stack[r]);
  };
  py::object result;
  if (returns == 0) {
    result = py::none();
  } else if (returns == 1) {
    result = py::reinterpret_steal<py::object>(value_of(0));
  } else {
    py::tuple values(returns);
    for (size_t r = 0; r < returns; ++r) {
      PyObject* value = value_of(r);
      if (value == nullptr) throw py::error_already_set();
      PyTuple_SET_ITEM(values.ptr(), r, value);
    }
    result = std::move(values);
  }
  if (!result) throw py::error_already_set();
  py::list inputs(unwrap.npu_inputs.size());
  for (size_t i = 0; i < unwrap.npu_inputs.size(); ++i) {
    inputs[i] = py::reinterpret_borrow<py::object>(unwrap.npu_inputs[i]);
  }
  // written tensors the kernel resized or re-pointed (out= ops): Python makes the npu tensor
  // match its host view (tensors.resync), as the Python path does
  py::list stale;
  for (const auto& w : unwrap.written) {
    const at::Tensor& t = THPVariable_Unpack(w.target);
    const at::Tensor& v = w.view;
    const bool same = t.sizes() == v.sizes() && t.strides() == v.strides() &&
                      t.storage_offset() == v.storage_offset() &&
                      v.storage().unsafeGetStorageImpl() == w.backing;
    if (!same) {
      stale.append(py::make_tuple(py::reinterpret_borrow<py::object>(w.target),
                                  py::reinterpret_steal<py::object>(THPVariable_Wrap(v))));
    }
  }
  py::object key = py::none();
  std::string bytes;
  if (fast_enabled && !unwrap.formatted && stale.empty() &&
      fast_key(op_id, entry, unwrap.npu_inputs, results.outputs, args, bytes)) {
    const auto found = fast_launches.find(bytes);
    // a copy: the allocator's and engine's callbacks run Python, which may learn() meanwhile
    if (found != fast_launches.end() && fast_launch(FastLaunch(found->second), state, results)) {
      py::list done(1);
      done[0] = result;
      return std::move(done);
    }
    key = py::bytes(bytes);
  }
  return py::make_tuple(result, inputs, results.outputs, results.fresh, stale,
                        py::bool_(unwrap.formatted), key);
}

// Take the storage allocator from ``like``, an npu tensor torch's Python backend made
// (torch._C._acc.create_empty_tensor), so that adopt()'s storages are made the same way; and
// the device's out-of-memory error type with ``raise_oom``, which raises torch's for it.
void init(const at::Tensor& like, py::object oom_type, py::object raise_oom) {
  TORCH_CHECK(like.device().type() == c10::DeviceType::PrivateUse1 && like.has_storage(),
              "init() needs an npu tensor with a storage");
  npu_allocator = like.storage().allocator();
  device_oom = std::move(oom_type);
  on_oom = std::move(raise_oom);
}

// An npu tensor as adopt() makes them, over a fresh CPU tensor of ``sizes`` (the self-test
// compares it with one from torch._C._acc.create_empty_tensor).
py::object empty_npu(std::vector<int64_t> sizes, py::object dtype) {
  const auto scalar_type = reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
  at::Tensor host = at::empty(sizes, at::TensorOptions().dtype(scalar_type));
  PyObject* out = adopt(host);
  if (out == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(out);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  npu_name = PyUnicode_InternFromString("_npu");
  fmt_name = PyUnicode_InternFromString("_npu_fmt");
  const std::pair<PyObject**, const char*> names[] = {
      {&s_capture, "capture"}, {&s_npu, "npu"},         {&s_l2, "l2"},
      {&s_compiled, "compiled"}, {&s_epoch, "epoch"},   {&s_engine, "engine"},
      {&s_bus, "bus"},         {&s_active, "active"},   {&s_stream, "stream"},
      {&s_stream_id, "stream_id"}, {&s_memory, "memory"}, {&s_hold, "hold"},
      {&s_launch_kernel, "launch_kernel"}, {&s_attrs, "attrs"}, {&s_npu_mem, "_npu_mem"},
  };
  for (const auto& [slot, text] : names) *slot = PyUnicode_InternFromString(text);
  m.def("abi_version", [] { return kAbiVersion; }, "The contract version run() keeps.");
  m.def("init", &init, "Take the npu storage allocator from an npu tensor torch made.");
  // the learned launches hold Python objects: drop them while Python still runs
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    fast_launches.clear();
    on_oom = py::object();
    device_oom = py::object();
  }));
  m.def("register_op", &register_op, "Register an op overload; its id, or -1.");
  m.def("run", &run, "Run a plain op on host views; [result], (result, inputs, ...) or None.");
  m.def("learn", &learn, "Teach run() the launch of a key it returned.");
  m.def("set_fast", &set_fast, "Turn the fast launch on or off.");
  m.def("empty_npu", &empty_npu, "An npu tensor as run() makes them (for the self-test).");
}
