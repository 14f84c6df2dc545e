// The compiled part of the npu adapter's per-op path (issue 20).
//
// For a plain op (no view, no host-only run, no value read back, no convolution, numerics
// "cpu"), the host half of the op runs here: the host views of the npu arguments, the op's CPU
// kernel through the dispatcher, and every fresh result wrapped as an npu tensor whose
// storage's Python object holds the result's CPU storage as attribute ``_npu`` -- what
// msprof_py/adapter/tensors.py's host_view and adopt do in Python, in one call. In-place and
// out= ops return their written arguments and name those the kernel resized. Device memory, the
// launch and recording are done by Python (backend._finish_native) the first time an op meets
// its shapes, dtypes and attribute values; Python then teaches this path that combination's
// launch (learn()), and later calls do it here: device memory for the fresh outputs from the
// caching allocator (hold), then the engine's launch_kernel for each kernel, the same calls in
// the same order (the fast launch). Any state the learned launch does not cover (a graph
// capture, L2 modelling, a new compile-cache epoch, recording without the task fields) sends
// the call back to Python's path.
//
// Two ways in, one core (host_run) working on torch's argument values (IValues):
//
// - npu_kernel(), the boxed PrivateUse1 kernel install_kernels() registers (the backend
//   fallback and the ops that run whole): torch calls it with the op's arguments on its stack.
//   With modelled host time and no dispatch mode, and no observer or the recorder with its row
//   sink and no stack capture, a view or plain op already seen by Python runs here without a
//   Python frame (a view: its Meta kernel; a plain op, numerics "cpu": the host half, then the
//   learned launch), the recorder's host-op row written from here. Everything else -- other
//   ops, an unlearned launch's finish -- is handed to the Python fallback with the arguments
//   converted as torch
//   converts them for a Python kernel (positional arguments up to the first trailing default,
//   keyword-only ones by name unless defaulted; dtypes, layouts and memory formats as their
//   Python objects) and the Python result converted back per the schema's returns.
// - run(), called by the Python fallback with the Python arguments (that same convention).
//
// A call outside the plain case changes nothing before it is handed to Python; when the CPU
// kernel raises, Python runs the op again for the real error (CPU kernels check their
// arguments before they write).
#include <ATen/ScalarOps.h>
#include <ATen/SequenceNumber.h>
#include <c10/core/GradMode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/SmallVector.h>

#include "row_api.h"  // the recorder's row sink, called without Python (device/native)

#include <algorithm>
#include <array>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

// device_guard.cpp: the npu's device guard and hooks, without Python
bool register_npu_device();
void set_storage_resize(void (*resize)(const c10::Storage&, size_t));

namespace {

// Containers of one call's tensors and values: a handful each for most ops, kept inline (no
// malloc per op); a foreach op's lists spill to the heap.
using Tensors = c10::SmallVector<at::Tensor, 4>;
//: bytes of a key fragment (the storage formats of a call's npu inputs)
using Bytes = c10::SmallVector<char, 64>;
//: fresh outputs' storages (kept alive by their tensors) and the bytes of their backings
using Storages = c10::SmallVector<std::pair<c10::StorageImpl*, int64_t>, 4>;

//: bumped whenever run()'s contract with msprof_py/adapter/backend.py changes
constexpr int kAbiVersion = 24;

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
  //: per argument: an int standing for a dtype, layout or memory format
  std::vector<bool> enum_valued;
  //: false once Python gave the op a host call of its own (drop_op): Python's path only
  bool enabled = true;
  //: the op's host-op name ("aten::mul", OpPlan.name)
  py::object name;
  //: a view op (register_view): its Meta kernel makes the alias on the npu tensor itself
  bool view = false;
  //: numerics "fast" computes it widened to float32 (fast_numerics): Python's path then
  bool widened = false;
  //: the CPU op the host half calls instead of this one (set_host_op: a convolution's)
  std::optional<c10::OperatorHandle> host_op;
  //: the host op is aten::convolution_backward, which takes bias_sizes (position 3) where
  //: convolution_backward_overrideable has none
  bool insert_bias_sizes = false;
};

//: what run() does for a learned (op, shapes, dtypes, attributes): see learn()
struct FastLaunch {
  //: ((cost, op_type), ...) of the kernels, in launch order (tuples)
  py::tuple kernels;
  //: the task-record fields of the launch (None: not known, recording takes Python's path)
  py::object fields;
  //: the op's task name and device-memory tag ("aten::mul")
  py::object name;
  //: the compile cache and its epoch the launch was learned in
  py::object compiled;
  int64_t epoch;
  //: None, or for each fresh output, in order: None, or the private format it is made in as
  //: (``_npu_fmt`` value, padded device bytes, memory tag), as backend._tag_outputs makes it
  py::object formats;
  //: ((cost, op_type, name, fields), ...): the kernels launched before the outputs' device
  //: memory is held: the TransData of inputs read through a temporary copy in another layout,
  //: and of plain inputs converted for good (their entries also hold the input's position among
  //: the npu inputs and its format tag: kConversionEntry)
  py::tuple before;
};

//: learned launches by key (see fast_key); cleared when it holds kFastLimit
std::unordered_map<std::string, std::shared_ptr<const FastLaunch>> fast_launches;
constexpr size_t kFastLimit = 100000;
bool fast_enabled = true;
//: host halves run here (host_run), the launches done here (learned), the ops the boxed kernel
//: ran itself (direct) and of those the ones whose host op row it wrote (recorded): counts()
int64_t host_runs = 0;
int64_t learned_launches = 0;
//: host views host_value made, and those it found kept (cached_view)
int64_t views_made = 0;
int64_t views_kept = 0;
int64_t direct_runs = 0;
int64_t recorded_runs = 0;
//: callable(exc) raising torch's out-of-memory error for the device's (set by init())
py::object on_oom;
//: the device's out-of-memory error type (set by init())
py::object device_oom;

//: a deque: entries keep their address while another thread registers an op (a CPU kernel
//: may run Python, which may let another thread take the GIL)
std::deque<OpEntry> ops;
//: registered ops by the address of their schema (the dispatcher's, stable): npu_kernel's lookup
std::unordered_map<const c10::FunctionSchema*, int> op_ids;
const c10::Device npu_device(c10::DeviceType::PrivateUse1, 0);
//: the allocator of the npu storages torch's Python backend makes (set by init())
c10::Allocator* npu_allocator = nullptr;

// ---- an npu storage's state ---------------------------------------------------------------
//
// An npu storage holds no bytes. What it stands for lives in its DataPtr's context, so that
// the compiled path reads and writes it without a Python object per storage: the backing
// storage holding its values (CPU, or meta with numerics "none"), the device memory it holds
// (the allocator's handle, which returns the block when it dies; absent in a graph's
// workspace) and, for data held in a private format, ``(format, logical shape)``. The DataPtr's
// data pointer is the held memory's device address (show_address). The context dies with the
// storage, as the storage's Python object and its attributes did before (tensors.py keeps that
// form where this module is not built).
struct StorageState {
  c10::Storage backing;
  //: owned references, or null
  PyObject* held = nullptr;
  PyObject* fmt = nullptr;
  //: host views made for npu tensors of this storage (``views[i].second``; adopt() keeps the
  //: CPU result itself), used again while they still match their tensor (cached_view): two, a
  //: tensor and one view of it (a weight and its transpose) taking turns; ``last``: the one
  //: made or used last (keep_view replaces the other)
  std::array<std::pair<at::Tensor, const c10::TensorImpl*>, 2> views{};
  uint8_t last = 0;
};

// ``state``'s kept host view when it stands for npu tensor ``t`` as it is now: made for the same
// tensor, on the backing it has, in its dtype, sizes, strides and offset (a kernel that
// resized or re-pointed it, or a metadata change of ``t``, makes it miss). Null otherwise.
const at::Tensor* cached_view(StorageState& state, const at::Tensor& t) {
  const c10::TensorImpl* npu = t.unsafeGetTensorImpl();
  for (uint8_t i = 0; i < state.views.size(); ++i) {
    const auto& [kept, owner] = state.views[i];
    if (owner != npu || !kept.defined()) continue;
    const c10::TensorImpl* view = kept.unsafeGetTensorImpl();
    const bool fits =
        view->storage().unsafeGetStorageImpl() == state.backing.unsafeGetStorageImpl() &&
        view->dtype() == npu->dtype() && view->storage_offset() == npu->storage_offset() &&
        view->sizes() == npu->sizes() && view->strides() == npu->strides();
    if (!fits) return nullptr;
    state.last = i;
    return &kept;
  }
  return nullptr;
}

// Whether ``t`` is a CPU tensor as host_value makes a host view: strided, no dispatch key but
// CPU's own and those of autograd and autocast for the CPU (no conjugate, negative, Python or
// other bits), no autograd data, no wrapped number.
bool is_plain_host(const at::Tensor& t) {
  static const c10::DispatchKeySet plain =
      c10::DispatchKeySet(c10::DispatchKey::CPU) |
      c10::getAutogradRelatedKeySetFromBackend(c10::BackendComponent::CPUBit) |
      c10::getAutocastRelatedKeySetFromBackend(c10::BackendComponent::CPUBit);
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return impl->key_set().has(c10::DispatchKey::CPU) && (impl->key_set() | plain) == plain &&
         impl->layout() == c10::kStrided && impl->autograd_meta() == nullptr &&
         !impl->is_wrapped_number();
}

// Keep host view ``view`` for npu tensor ``owner`` in ``state``, in place of the one kept for
// ``owner`` before, else of the one not used last.
void keep_view(StorageState& state, const c10::TensorImpl* owner, const at::Tensor& view) {
  auto& slots = state.views;
  uint8_t slot = state.last ^ 1;  // the one not used last, or the one made for ``owner`` before
  for (uint8_t i = 0; i < slots.size(); ++i) {
    if (slots[i].second == owner) slot = i;
  }
  slots[slot] = {view, owner};
  state.last = slot;
}

// Drop ``state``'s kept host views (made for a backing it no longer has).
void drop_views(StorageState& state) { state.views = {}; }

// The context's deleter: drops the Python references with the GIL (torch may free a storage
// on a thread without it), none once Python is gone.
void delete_state(void* context) {
  auto* state = static_cast<StorageState*>(context);
  if ((state->held != nullptr || state->fmt != nullptr) && Py_IsInitialized()) {
    const PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(state->held);
    Py_XDECREF(state->fmt);
    PyGILState_Release(gil);
  }
  delete state;
}

// ``storage``'s state, or null for a storage msprof-py gave none.
StorageState* state_of(const c10::StorageImpl* storage) {
  const c10::DataPtr& data = storage->data_ptr();
  if (data.get_deleter() != &delete_state) return nullptr;
  return static_cast<StorageState*>(data.get_context());
}

// ``storage``'s state, made empty where it has none (its data pointer kept).
StorageState& ensure_state(c10::StorageImpl* storage) {
  if (StorageState* state = state_of(storage)) return *state;
  auto* state = new StorageState();
  void* address = storage->data_ptr().get();
  storage->set_data_ptr_noswap(c10::DataPtr(address, state, &delete_state, npu_device));
  return *state;
}

// Point ``storage``'s data pointer at ``address``, its state (``state``, from ensure_state) kept.
void set_address(c10::StorageImpl* storage, StorageState& state, void* address) {
  storage->_mutable_data_ptr_no_checks().release_context();
  storage->set_data_ptr_noswap(c10::DataPtr(address, &state, &delete_state, npu_device));
}

// Replace an owned reference (the old one dropped after the new is in place: dropping a memory
// handle frees its block, which may run Python).
void replace_reference(PyObject*& slot, PyObject* value) {
  PyObject* old = slot;
  Py_XINCREF(value);
  slot = value;
  Py_XDECREF(old);
}

// Optional attribute lookup without raising on a miss (1: found, 0: missing, -1: error).
int lookup(PyObject* obj, PyObject* name, PyObject** out) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyObject_GetOptionalAttr(obj, name, out);
#else
  return _PyObject_LookupAttr(obj, name, out);
#endif
}

// The kind of an argument of ``type`` (or of an optional one) when its int stands for a dtype,
// a layout or a memory format (its Python value is torch's object for it); else AnyType.
c10::TypeKind enum_kind(const c10::TypePtr& type) {
  c10::TypePtr element = type;
  if (auto opt = type->cast<c10::OptionalType>()) element = opt->getElementType();
  const auto kind = element->kind();
  const bool is_enum = kind == c10::TypeKind::ScalarTypeType ||
                       kind == c10::TypeKind::LayoutType ||
                       kind == c10::TypeKind::MemoryFormatType;
  return is_enum ? kind : c10::TypeKind::AnyType;
}

bool is_enum(const c10::TypePtr& type) { return enum_kind(type) != c10::TypeKind::AnyType; }

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
                const std::vector<int64_t>& attr_slots, py::str host_name) {
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle.has_value()) return -1;
  const auto& schema = handle->schema();
  const size_t count = schema.arguments().size();
  if (return_aliases.size() != schema.returns().size()) return -1;
  OpEntry entry{*handle, {}, {}, {}, {},
                std::vector<bool>(count, false), {}, wraps_numbers, attr_slots};
  entry.name = std::move(host_name);
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
    entry.enum_valued.push_back(is_enum(arg.real_type()));
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
  const int id = static_cast<int>(ops.size()) - 1;
  op_ids[&handle->schema()] = id;
  return id;
}

// Register view op ``name``.``overload`` (OpPlan.view: a return aliases an argument without
// writing it), whose host op is ``host_name``: the boxed kernel runs its Meta kernel on the
// npu tensors, as backend.fallback does. Its id, or -1 when torch has no such op.
int register_view(const std::string& name, const std::string& overload, py::str host_name) {
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle.has_value()) return -1;
  OpEntry entry{*handle};
  entry.name = std::move(host_name);
  entry.view = true;
  ops.push_back(std::move(entry));
  const int id = static_cast<int>(ops.size()) - 1;
  op_ids[&handle->schema()] = id;
  return id;
}

// Python gave op ``op_id`` a host call of its own (backend.replace_host_call): only Python's
// path runs it from now on.
void drop_op(int op_id) { ops.at(static_cast<size_t>(op_id)).enabled = false; }

// Op ``op_id`` is computed widened to float32 under numerics "fast" (its low-precision inputs
// widened, its float32 results rounded back, as fast_numerics.call_widened does).
void set_widened(int op_id) { ops.at(static_cast<size_t>(op_id)).widened = true; }

// Op ``op_id`` has no CPU kernel of its own (convolution_overrideable): its host half calls
// CPU op ``name``.``overload`` with the same arguments, plus, with ``bias_sizes``, the
// bias_sizes aten::convolution_backward takes at position 3 (as kernels._conv_backward makes
// it). False, and the op taken off this path, when that op's arguments do not line up.
bool set_host_op(int op_id, const std::string& name, const std::string& overload,
                 bool bias_sizes) {
  OpEntry& entry = ops.at(static_cast<size_t>(op_id));
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  const size_t expected = entry.kinds.size() + (bias_sizes ? 1 : 0);
  if (!handle.has_value() || handle->schema().arguments().size() != expected ||
      (bias_sizes && entry.kinds.size() != 10)) {
    entry.enabled = false;
    return false;
  }
  entry.host_op = *handle;
  entry.insert_bias_sizes = bias_sizes;
  return true;
}

// The bias_sizes of a convolution backward whose overrideable arguments are on ``stack``
// (grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups,
// output_mask): the bias's length when output_mask asks for its gradient, else None.
c10::IValue bias_sizes_of(const torch::jit::Stack& stack) {
  const auto mask = stack[9].toBoolList();
  if (mask.size() < 3 || !mask.get(2)) return c10::IValue();
  const at::Tensor& weight = stack[2].toTensor();
  const int64_t length = stack[6].toBool() ? weight.size(1) : weight.size(0);
  return c10::IValue(std::vector<int64_t>{length});
}

// ---- torch's boxed convention for Python kernels -------------------------------------------

// The Python value of ``value`` for schema argument ``arg``: dtypes, layouts and memory formats
// as torch's objects (their IValues are ints), anything else as torch::jit::toPyObject makes it.
py::object python_value(const c10::Argument& arg, const c10::IValue& value) {
  if (value.isNone()) return py::none();
  switch (enum_kind(arg.real_type())) {
    case c10::TypeKind::ScalarTypeType:
      return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(
          torch::getTHPDtype(static_cast<c10::ScalarType>(value.toInt()))));
    case c10::TypeKind::LayoutType:
      return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(
          torch::getTHPLayout(static_cast<c10::Layout>(value.toInt()))));
    case c10::TypeKind::MemoryFormatType:
      return py::reinterpret_borrow<py::object>(
          torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(value.toInt())));
    default:
      return torch::jit::toPyObject(value);
  }
}

// The Python (args, kwargs) of a boxed call, as torch hands them to a Python kernel: positional
// arguments up to the last one that is not at its default, keyword-only arguments by name
// unless at their default.
bool at_default(const c10::Argument& param, const c10::IValue& value) {
  const auto& fallback = param.default_value();
  return fallback.has_value() && *fallback == value;
}

size_t keyword_start(const c10::FunctionSchema& schema, size_t count) {
  const auto& params = schema.arguments();
  while (count > 0 && params[count - 1].kwarg_only()) --count;
  return count;
}

// How many arguments a Python kernel gets positionally: up to the last positional one that is
// not at its default.
size_t positional_count(const c10::FunctionSchema& schema,
                        const std::vector<c10::IValue>& arguments) {
  const auto& params = schema.arguments();
  size_t positional = keyword_start(schema, arguments.size());
  while (positional > 0 && at_default(params[positional - 1], arguments[positional - 1])) {
    --positional;
  }
  return positional;
}

std::pair<py::tuple, py::dict> python_arguments(const c10::FunctionSchema& schema,
                                                const std::vector<c10::IValue>& arguments) {
  const auto& params = schema.arguments();
  const size_t positional = positional_count(schema, arguments);
  py::tuple args(positional);
  for (size_t i = 0; i < positional; ++i) {
    PyTuple_SET_ITEM(args.ptr(), i, python_value(params[i], arguments[i]).release().ptr());
  }
  py::dict kwargs;
  for (size_t i = keyword_start(schema, arguments.size()); i < arguments.size(); ++i) {
    if (!at_default(params[i], arguments[i])) {
      kwargs[py::str(params[i].name())] = python_value(params[i], arguments[i]);
    }
  }
  return {std::move(args), std::move(kwargs)};
}

// Push Python kernel result ``out`` on ``stack`` per the schema's returns.
void push_python_result(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                        const py::object& out) {
  const auto& returns = op.schema().returns();
  if (returns.empty()) {
    TORCH_CHECK(out.is_none(), "the npu fallback for ", op.operator_name(),
                " returned a value where None was expected");
  } else if (returns.size() == 1) {
    torch::jit::push(stack, torch::jit::toIValue(out, returns[0].real_type()));
  } else {
    const auto values = py::cast<py::sequence>(out);
    for (size_t i = 0; i < values.size(); ++i) {
      torch::jit::push(stack, torch::jit::toIValue(values[i], returns[i].real_type()));
    }
  }
}

// ---- the host half of one call -------------------------------------------------------------

// The arguments of one call, turned into the CPU kernel's stack.
// Append to ``key`` what an npu input's storage format (``fmt``, its storage's ``_npu_fmt``:
// (format name, logical shape), or nullptr) means to the launch: 0 for none, else the name and
// whether the logical shape is ``t``'s own (a view of a formatted storage is read through a
// TransData). False when ``fmt`` is not such a tuple.
bool put_format(Bytes& key, PyObject* fmt, const at::Tensor& t) {
  auto put_int = [&key](int64_t value) {
    const char* bytes = reinterpret_cast<const char*>(&value);
    key.append(bytes, bytes + sizeof value);
  };
  if (fmt == nullptr) {
    put_int(0);
    return true;
  }
  if (!PyTuple_Check(fmt) || PyTuple_GET_SIZE(fmt) != 2) return false;
  Py_ssize_t length = 0;
  const char* name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(fmt, 0), &length);
  PyObject* shape = PyTuple_GET_ITEM(fmt, 1);
  if (name == nullptr || !PyTuple_Check(shape)) {
    PyErr_Clear();
    return false;
  }
  put_int(1 + length);
  key.append(name, name + length);
  bool same = PyTuple_GET_SIZE(shape) == t.dim();
  for (Py_ssize_t d = 0; same && d < PyTuple_GET_SIZE(shape); ++d) {
    const long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
    if (size == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    same = size == t.sizes()[d];
  }
  put_int(same ? 1 : 0);
  return true;
}

class Unwrapper {
 public:
  //: an npu tensor the op writes, its host view, and the backing storage the view had
  struct Written {
    at::Tensor target;
    at::Tensor view;
    const c10::StorageImpl* backing;
  };

  //: every npu argument in order of appearance
  Tensors npu_inputs;
  c10::SmallVector<Written, 2> written;
  //: an npu argument is held in a private format (its storage has ``_npu_fmt``)
  bool formatted = false;
  //: the storage formats of ``npu_inputs``, in order, as the learned-launch key holds them
  //: (put_format); ``formats_known`` false when one could not be read
  Bytes formats;
  bool formats_known = true;

  // Append the host value of argument ``value`` for schema slot ``index``; false when it is
  // outside the plain case.
  bool push(const OpEntry& entry, size_t index, const c10::IValue& value,
            torch::jit::Stack& stack) {
    const Kind kind = entry.kinds[index];
    // as in the Python path, written tensors are checked for a new size or storage after the
    // call; written lists (foreach ops) are not
    writing_ = entry.written[index] && (kind == Kind::kTensor || kind == Kind::kOptionalTensor);
    bool ok = true;
    switch (kind) {
      case Kind::kOptionalTensor:
        // torch boxes an absent optional tensor as None or, from C++ callers that pass an
        // undefined tensor (conv2d's bias), as that undefined tensor: both mean None
        if (value.isNone() || (value.isTensor() && !value.toTensor().defined())) {
          stack.emplace_back();
          break;
        }
        [[fallthrough]];
      case Kind::kTensor: {
        at::Tensor host;
        ok = value.isTensor() && host_value(value.toTensor(), host);
        if (ok) stack.emplace_back(std::move(host));
        break;
      }
      case Kind::kTensorList:
        ok = value.isTensorList() && push_list(value, stack);
        break;
      case Kind::kOther:
        stack.push_back(value);
        break;
    }
    writing_ = false;
    return ok;
  }

 private:
  //: an npu tensor met before: its host view, and where its put_format fragment is in
  //: ``formats``
  struct Seen {
    at::Tensor host;
    size_t at;
    size_t length;
  };
  //: the npu tensors met so far, searched in order while there are few (no allocation); a call
  //: with many (a foreach op's lists) indexes them in ``index_``, an open-addressing table of
  //: positions in ``seen_`` plus one (0: empty), at most half full
  c10::SmallVector<std::pair<const c10::TensorImpl*, Seen>, 4> seen_;
  std::vector<uint32_t> index_;
  static constexpr size_t kLinearSeen = 16;

  size_t slot_of(const c10::TensorImpl* impl) const {
    const size_t mask = index_.size() - 1;
    size_t slot = (reinterpret_cast<uintptr_t>(impl) >> 4) & mask;
    while (index_[slot] != 0 && seen_[index_[slot] - 1].first != impl) slot = (slot + 1) & mask;
    return slot;
  }

  const Seen* find_seen(const c10::TensorImpl* impl) const {
    if (index_.empty()) {
      for (const auto& [known, seen] : seen_) {
        if (known == impl) return &seen;
      }
      return nullptr;
    }
    const uint32_t position = index_[slot_of(impl)];
    return position == 0 ? nullptr : &seen_[position - 1].second;
  }

  void add_seen(const c10::TensorImpl* impl, Seen seen) {
    seen_.emplace_back(impl, std::move(seen));
    if (seen_.size() <= kLinearSeen) return;
    if (seen_.size() * 2 > index_.size()) {  // more than half full: rebuilt twice as large
      index_.assign(std::max<size_t>(64, index_.size() * 2), 0);
      for (size_t i = 0; i < seen_.size(); ++i) {
        index_[slot_of(seen_[i].first)] = static_cast<uint32_t>(i + 1);
      }
    } else {
      index_[slot_of(impl)] = static_cast<uint32_t>(seen_.size());
    }
  }
  //: the argument being pushed is one the op writes
  bool writing_ = false;

  void note_written(const at::Tensor& target, const at::Tensor& host) {
    if (writing_) written.push_back({target, host, host.storage().unsafeGetStorageImpl()});
  }

  bool push_list(const c10::IValue& value, torch::jit::Stack& stack) {
    const auto items = value.toTensorList();
    c10::List<at::Tensor> list;
    list.reserve(items.size());
    for (const at::Tensor t : items) {
      at::Tensor host;
      if (!host_value(t, host)) return false;
      list.push_back(std::move(host));
    }
    stack.emplace_back(std::move(list));
    return true;
  }

 public:
  // The host tensor standing for tensor argument ``t``: the host view of an npu tensor (the
  // same view for the same tensor twice: CPU kernels check aliasing by identity), or a 0-dim
  // CPU tensor as it is (a private format changes no value: the host view reads the logical
  // layout). False for anything else (a CPU tensor with dimensions beside npu ones is an
  // error the Python path reports; conjugate and negative bits, quantized tensors, tensor
  // subclasses with a Python dispatch key, tensors made outside msprof-py).
  bool host_value(const at::Tensor& t, at::Tensor& host) {
    if (!t.defined()) return false;
    const auto device = t.device().type();
    if (device == c10::DeviceType::CPU) {
      if (t.dim() > 0 || writing_) return false;
      host = t;
      return true;
    }
    if (device != c10::DeviceType::PrivateUse1 || t.is_conj() || t.is_neg() ||
        t.is_quantized() || t.key_set().has(c10::DispatchKey::Python)) {
      return false;
    }
    npu_inputs.push_back(t);
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (const Seen* seen = find_seen(impl)) {
      host = seen->host;
      const size_t at = seen->at;
      const size_t length = seen->length;
      formats.reserve(formats.size() + length);  // append() reads from formats itself
      formats.append(formats.begin() + at, formats.begin() + at + length);
      note_written(t, host);
      return true;
    }
    if (!t.has_storage()) return false;
    StorageState* state = state_of(t.storage().unsafeGetStorageImpl());
    if (state == nullptr || !state->backing) return false;
    if (state->fmt != nullptr) formatted = true;  // held in a private format
    const size_t at = formats.size();
    if (!put_format(formats, state->fmt, t)) formats_known = false;
    const c10::Storage& bytes = state->backing;
    if (bytes.device_type() != c10::DeviceType::CPU) return false;
    if (const at::Tensor* kept = cached_view(*state, t)) {
      host = *kept;
      ++views_kept;
    } else {
      ++views_made;
      host = at::detail::make_tensor<c10::TensorImpl>(
          c10::Storage(bytes), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
      host.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(),
                                                        t.storage_offset());
      keep_view(*state, impl, host);
    }
    add_seen(impl, Seen{host, at, formats.size() - at});
    note_written(t, host);
    return true;
  }
};

// A new npu tensor holding CPU tensor ``result``'s values: sizes, strides and offset of
// ``result``, a storage without bytes whose state's backing is ``result``'s storage. Its device
// memory comes from Python (tensors.attach_memory) or the fast launch.
at::Tensor adopt(const at::Tensor& result) {
  if (npu_allocator == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "msprof_hot_path: init() was not called");
    throw py::error_already_set();
  }
  auto* state = new StorageState();
  state->backing = result.storage();
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       c10::DataPtr(nullptr, state, &delete_state, npu_device), npu_allocator,
                       true);
  at::Tensor out = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), result.dtype());
  c10::TensorImpl* impl = out.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(result.sizes(), result.strides(), result.storage_offset());
  if (result.is_conj()) impl->_set_conj(true);
  if (result.is_neg()) impl->_set_neg(true);
  // the result is the host view of what it became when it is one as host_value makes them
  if (is_plain_host(result)) keep_view(*state, impl, result);
  return out;
}

// The Python object of a tensor, a list of tensors or None (an undefined tensor).
py::object python_tensors(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined()) return py::none();
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(t));
  }
  if (value.isTensorList()) {
    py::list items;
    for (const at::Tensor t : value.toTensorList()) items.append(python_tensors(c10::IValue(t)));
    return std::move(items);
  }
  return py::none();
}

// One call's host half (host_run): its results as npu values, and what Python or the fast
// launch needs to finish it.
struct HostCall {
  Unwrapper unwrap;
  //: the op's returns as npu values (written arguments, fresh npu tensors)
  c10::SmallVector<c10::IValue, 4> returns;
  //: every output tensor in order (undefined for None), written arguments included
  Tensors outputs;
  //: the npu tensors adopt() made (they need device memory)
  Tensors fresh;
  //: for each of ``fresh``: its storage and the bytes of its backing
  Storages storages;
  //: written tensors the kernel resized or re-pointed: (npu tensor, host view)
  std::vector<std::pair<at::Tensor, at::Tensor>> stale;
  //: the key to learn the launch by (keyed: one could be made)
  std::string key;
  bool keyed = false;

  // The npu value of fresh result ``value`` (a tensor or a list of them).
  c10::IValue adopt_value(const c10::IValue& value) {
    if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      if (!t.defined()) {
        outputs.emplace_back();
        return value;
      }
      at::Tensor out = adopt(t);
      storages.emplace_back(out.storage().unsafeGetStorageImpl(),
                            static_cast<int64_t>(t.storage().nbytes()));
      outputs.push_back(out);
      fresh.push_back(out);
      return out;
    }
    c10::List<at::Tensor> wrapped;
    for (const at::Tensor t : value.toTensorList()) {
      wrapped.push_back(adopt_value(c10::IValue(t)).toTensor());
    }
    return wrapped;
  }

  // The npu value of a result that is written argument ``target``: the argument itself.
  c10::IValue written_value(const c10::IValue& target) {
    if (target.isTensor()) {
      outputs.push_back(target.toTensor());
    } else if (target.isTensorList()) {
      for (const at::Tensor t : target.toTensorList()) outputs.push_back(t);
    }
    return target;
  }

  // The op's result as Python returns it: None, one value or a tuple.
  py::object python_result() const {
    if (returns.empty()) return py::none();
    if (returns.size() == 1) return python_tensors(returns[0]);
    py::tuple values(returns.size());
    for (size_t r = 0; r < returns.size(); ++r) {
      PyTuple_SET_ITEM(values.ptr(), r, python_tensors(returns[r]).release().ptr());
    }
    return std::move(values);
  }

  // What backend._finish_native takes: (result, npu inputs, outputs, fresh outputs, stale
  // written tensors as (tensor, host view) pairs, whether an npu argument is held in a private
  // format, the key to learn() this launch by or None).
  py::object python_found() const {
    auto tensors = [](const Tensors& items) {
      py::list out;
      for (const auto& t : items) out.append(python_tensors(c10::IValue(t)));
      return out;
    };
    py::list stale_pairs;
    for (const auto& [target, view] : stale) {
      stale_pairs.append(py::make_tuple(python_tensors(c10::IValue(target)),
                                        python_tensors(c10::IValue(view))));
    }
    return py::make_tuple(python_result(), tensors(unwrap.npu_inputs), tensors(outputs),
                          tensors(fresh), stale_pairs, py::bool_(unwrap.formatted),
                          keyed ? py::object(py::bytes(key)) : py::object(py::none()));
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
PyObject* s_block_size = nullptr;
PyObject* s_address = nullptr;
PyObject* s_state = nullptr;
PyObject* s_observer = nullptr;
PyObject* s_measured = nullptr;
PyObject* s_native = nullptr;
PyObject* s_fast = nullptr;

// Attribute ``name`` (an interned str) of ``obj``; throws the Python error.
py::object get(py::handle obj, PyObject* name) {
  PyObject* value = PyObject_GetAttr(obj.ptr(), name);
  if (value == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(value);
}

bool truthy(const py::object& value) {
  const int truth = PyObject_IsTrue(value.ptr());
  if (truth < 0) throw py::error_already_set();
  return truth != 0;
}

void put(std::string& key, int64_t value) {
  key.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// What a key holds of tensor ``t``, value by value to ``put_value``: its dtype, dim and sizes
// (-2 when undefined).
template <typename PutValue>
void tensor_key_values(const at::Tensor& t, PutValue&& put_value) {
  if (!t.defined()) {
    put_value(-2);
    return;
  }
  put_value(static_cast<int64_t>(t.scalar_type()));
  put_value(t.dim());
  for (const int64_t size : t.sizes()) put_value(size);
}

void put_tensor(std::string& key, const at::Tensor& t) {
  tensor_key_values(t, [&](int64_t value) { put(key, value); });
}

// The key a launch is learned by: the op, the dtype and sizes of every npu input and output
// and the storage formats of the inputs (what the Python path's cost-cache key holds; an
// output's format follows from its inputs' in a launch that converted none), and the values at
// the op's attribute slots (the arguments compile_cache.attributes_at may keep; their defaults
// where the call leaves them out, which the Python arguments then lack too). Numbers that are
// never attributes (floats) are left out, as in Python. False when an attribute is of a kind
// the key does not hold.
bool fast_key(int op_id, const OpEntry& entry, const HostCall& call,
              const std::vector<c10::IValue>& arguments, std::string& key) {
  const auto& inputs = call.unwrap.npu_inputs;
  key.reserve(16 * (inputs.size() + call.outputs.size() + entry.attr_slots.size()) + 32);
  put(key, op_id);
  for (const auto& t : inputs) put_tensor(key, t);
  key.append(call.unwrap.formats.begin(), call.unwrap.formats.end());
  put(key, -1);
  for (const auto& t : call.outputs) put_tensor(key, t);
  put(key, -1);
  for (const int64_t slot : entry.attr_slots) {
    const c10::IValue& a = arguments[slot];
    if (a.isTensor()) {
      // a wrapped number (the 7 of ``x % 7``: a 0-dim CPU tensor of the Python number's type)
      // is a Python number to compile_cache.attributes: an int or a bool is an attribute, a
      // float is not; read in place, no dispatch
      const at::Tensor& t = a.toTensor();
      if (!t.defined() || !t.unsafeGetTensorImpl()->is_wrapped_number()) continue;
      if (t.scalar_type() == at::kBool) {
        put(key, 2);
        put(key, *t.const_data_ptr<bool>());
      } else if (t.scalar_type() == at::kLong) {
        put(key, 3);
        put(key, *t.const_data_ptr<int64_t>());
      }
      continue;
    }
    if (a.isDouble() || a.isComplexDouble()) continue;
    if (a.isNone()) {
      put(key, 1);
    } else if (a.isBool()) {
      put(key, 2);
      put(key, a.toBool());
    } else if (a.isInt()) {
      put(key, entry.enum_valued[slot] ? 5 : 3);
      put(key, a.toInt());
    } else if (a.isIntList()) {
      const auto values = a.toListRef();  // in place (toIntVector copies)
      put(key, 4);
      put(key, static_cast<int64_t>(values.size()));
      for (const c10::IValue& v : values) put(key, v.toInt());
    } else if (a.isBoolList()) {  // an output mask (native_batch_norm_backward's)
      const auto values = a.toBoolList();
      put(key, 7);
      put(key, static_cast<int64_t>(values.size()));
      for (const bool v : values) put(key, v ? 1 : 0);
    } else if (a.isString()) {
      const auto& text = a.toStringRef();
      put(key, 6);
      put(key, static_cast<int64_t>(text.size()));
      key.append(text);
    } else if (a.isDoubleList()) {
      continue;  // floats: never attributes
    } else if (a.isList()) {
      // a Scalar[] (a foreach op's scalars): an attribute when it holds only ints, as a tuple of
      // them (compile_cache.attributes); with a float, a bool or nothing in it, none
      const auto items = a.toListRef();
      const bool ints = !items.empty() && std::all_of(items.begin(), items.end(),
                                                      [](const c10::IValue& x) { return x.isInt(); });
      if (!ints) continue;
      put(key, 4);
      put(key, static_cast<int64_t>(items.size()));
      for (const c10::IValue& x : items) put(key, x.toInt());
    } else {
      return false;
    }
  }
  return true;
}

// Numerics "fast" (fast_numerics.call_widened): the float16 or bfloat16 tensors on ``stack``
// widened to float32 in place, and that dtype; nothing changed (nullopt) when there are none
// or they mix the two.
std::optional<at::ScalarType> widen_low_precision(torch::jit::Stack& stack) {
  std::optional<at::ScalarType> low;
  for (const auto& value : stack) {
    if (!value.isTensor()) continue;
    const auto dtype = value.toTensor().scalar_type();
    if (dtype != at::kHalf && dtype != at::kBFloat16) continue;
    if (low.has_value() && *low != dtype) return std::nullopt;
    low = dtype;
  }
  if (!low.has_value()) return low;
  for (auto& value : stack) {
    if (value.isTensor() && value.toTensor().scalar_type() == *low) {
      value = value.toTensor().to(at::kFloat);
    }
  }
  return low;
}

// The float32 tensors an op widened by widen_low_precision returned, rounded back to ``low``.
void narrow_results(torch::jit::Stack& stack, at::ScalarType low) {
  for (auto& value : stack) {
    if (value.isTensor() && value.toTensor().defined() &&
        value.toTensor().scalar_type() == at::kFloat) {
      value = value.toTensor().to(low);
    }
  }
}

// Run op ``op_id`` on the host views of ``arguments`` (every schema argument, defaults
// included): the CPU kernel, fresh npu outputs, the stale written tensors and the learned-launch
// key; ``widen``: computed widened (numerics "fast" and an op it widens). False, with nothing
// changed, when the call is outside the plain case or the CPU kernel raised.
bool host_run(int op_id, const OpEntry& entry, const std::vector<c10::IValue>& arguments,
              HostCall& call, bool widen) {
  const size_t count = entry.kinds.size();
  torch::jit::Stack stack;
  stack.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (!call.unwrap.push(entry, i, arguments[i], stack)) return false;
  }
  try {
    const auto low = widen ? widen_low_precision(stack) : std::nullopt;
    if (entry.insert_bias_sizes) stack.insert(stack.begin() + 3, bias_sizes_of(stack));
    (entry.host_op ? *entry.host_op : entry.handle).callBoxed(stack);
    if (low.has_value()) narrow_results(stack, *low);
  } catch (const std::exception&) {
    PyErr_Clear();
    return false;
  }
  call.returns.reserve(stack.size());
  for (size_t r = 0; r < stack.size(); ++r) {
    const int64_t alias = entry.return_aliases[r];
    call.returns.push_back(alias >= 0 ? call.written_value(arguments[alias])
                                      : call.adopt_value(stack[r]));
  }
  // written tensors the kernel resized or re-pointed (out= ops): Python makes the npu tensor
  // match its host view (tensors.resync), as the Python path does
  for (const auto& w : call.unwrap.written) {
    const at::Tensor& t = w.target;
    const at::Tensor& v = w.view;
    const bool same = t.sizes() == v.sizes() && t.strides() == v.strides() &&
                      t.storage_offset() == v.storage_offset() &&
                      v.storage().unsafeGetStorageImpl() == w.backing;
    if (!same) call.stale.emplace_back(t, v);
  }
  call.keyed = fast_enabled && call.unwrap.formats_known && call.stale.empty() &&
               fast_key(op_id, entry, call, arguments, call.key);
  ++host_runs;
  return true;
}

// The device objects a learned launch calls, looked up once per simulated device (a device
// sets them when it is made): its engine, record bus, allocator's hold and launch_kernel.
struct DeviceObjects {
  py::object npu;
  py::object bus;
  py::object hold;
  py::object block_size;
  py::object launch;
};
DeviceObjects device_objects;

const DeviceObjects& objects_of(const py::object& npu) {
  if (!device_objects.npu.is(npu)) {
    const py::object engine = get(npu, s_engine);
    const py::object memory = get(npu, s_memory);
    device_objects = {npu, get(engine, s_bus), get(memory, s_hold), get(memory, s_block_size),
                      get(engine, s_launch_kernel)};
  }
  return device_objects;
}

// ``callable(*args)``; throws the Python error.
py::object call(const py::object& callable, std::initializer_list<PyObject*> args) {
  PyObject* out = PyObject_Vectorcall(callable.ptr(), const_cast<PyObject* const*>(args.begin()),
                                      args.size(), nullptr);
  if (out == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(out);
}

// ``obj.name(*args)`` without a bound-method object (PyObject_VectorcallMethod); throws the
// Python error. At most 15 arguments.
py::object call_method(const py::object& obj, PyObject* name,
                       std::initializer_list<PyObject*> args) {
  PyObject* stack[16];
  if (args.size() >= 16) throw std::invalid_argument("call_method: at most 15 arguments");
  stack[0] = obj.ptr();
  const size_t n = args.size();
  std::copy_n(args.begin(), n, stack + 1);
  PyObject* out = PyObject_VectorcallMethod(name, stack, n + 1, nullptr);
  if (out == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(out);
}

// Device memory of ``size`` bytes (a Python int) from allocator hold ``hold`` for ``stream_id``
// under memory tag ``tag``, as tensors.reserve asks for it; an out-of-memory is raised as
// torch's error.
py::object hold_memory(const py::object& hold, PyObject* size, PyObject* stream_id,
                       PyObject* tag) {
  try {
    return call(hold, {size, stream_id, tag});
  } catch (py::error_already_set& error) {
    if (error.matches(device_oom)) on_oom(error.value());  // raises torch's error
    throw;
  }
}

// Show ``storage``'s held device memory as its data pointer and its backing's size as its
// nbytes, as a torch_npu storage shows its device memory: libraries tell storages apart by them
// (transformers' tied-weight check when saving). No memory held (a graph's workspace): a null
// pointer. ``nbytes``: the backing's size when the caller knows it (else looked up).
void show_address(c10::StorageImpl* storage, StorageState& state, int64_t nbytes) {
  uintptr_t address = 0;
  if (state.held != nullptr) {
    const py::object value = get(state.held, s_address);
    address = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(value.ptr()));
    if (PyErr_Occurred()) throw py::error_already_set();
  }
  if (nbytes < 0 && state.backing) nbytes = static_cast<int64_t>(state.backing.nbytes());
  if (nbytes >= 0) storage->set_nbytes(nbytes);
  set_address(storage, state, reinterpret_cast<void*>(address));
}

// Give ``storage`` the device memory ``held`` (a handle, or None in a graph's workspace), the
// memory it held before returned, and show it (show_address, ``nbytes`` as there).
void set_memory(c10::StorageImpl* storage, py::handle held, int64_t nbytes = -1) {
  StorageState& state = ensure_state(storage);
  replace_reference(state.held, held.is_none() ? nullptr : held.ptr());
  show_address(storage, state, nbytes);
}

// Tag ``storage`` with private format ``tag`` ((``_npu_fmt`` value, padded device bytes,
// memory tag)), as tensors.set_storage_format does, and hold it in its padded size when that
// exceeds its block (tensors.hold_device_bytes).
void tag_storage(c10::StorageImpl* storage, PyObject* tag, const DeviceObjects& device,
                 const py::object& stream) {
  StorageState& state = ensure_state(storage);
  replace_reference(state.fmt, PyTuple_GET_ITEM(tag, 0));
  PyObject* padded = PyTuple_GET_ITEM(tag, 1);
  long long current = 0;
  if (state.held != nullptr) {
    const py::object address = get(state.held, s_address);
    current = PyLong_AsLongLong(call(device.block_size, {address.ptr()}).ptr());
    if (current == -1 && PyErr_Occurred()) throw py::error_already_set();
  }
  const long long wanted = PyLong_AsLongLong(padded);
  if (wanted == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (wanted <= current) return;
  const py::object stream_id = get(stream, s_stream_id);
  set_memory(storage, hold_memory(device.hold, padded, stream_id.ptr(), PyTuple_GET_ITEM(tag, 2)));
}

// The fresh outputs' private formats, as backend._tag_outputs gives them after their device
// memory (tag_storage).
void tag_formats(const FastLaunch& fast, const DeviceObjects& device, const py::object& stream,
                 const Storages& storages) {
  PyObject* formats = fast.formats.ptr();
  for (size_t i = 0; i < storages.size(); ++i) {
    PyObject* tag = PyTuple_GET_ITEM(formats, static_cast<Py_ssize_t>(i));
    if (tag != Py_None) tag_storage(storages[i].first, tag, device, stream);
  }
}

//: the size of a ``before`` entry of a learned launch that converts an input for good:
//: (cost, op_type, name, fields, position among the npu inputs, tag as tag_storage takes it)
constexpr Py_ssize_t kConversionEntry = 6;

// Whether the inputs ``fast``'s ``before`` entries convert for good are as backend.transdata
// converted them when it was learned (the key holds their formats, dtypes and sizes, not
// whether they are contiguous).
bool conversions_apply(const FastLaunch& fast, const HostCall& host) {
  PyObject* before = fast.before.ptr();
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(before); ++k) {
    PyObject* entry = PyTuple_GET_ITEM(before, k);
    if (PyTuple_GET_SIZE(entry) != kConversionEntry) continue;
    const Py_ssize_t position = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 4));
    if (position < 0 || static_cast<size_t>(position) >= host.unwrap.npu_inputs.size() ||
        !host.unwrap.npu_inputs[position].is_contiguous()) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

// Launch one learned kernel on ``stream``: with its task-record ``fields`` and ``attrs`` while
// recording (as backend._submit does), else without.
void launch_kernel(const py::object& launch, const py::object& stream, PyObject* cost,
                   PyObject* name, PyObject* op_type, bool recording, PyObject* fields,
                   const py::object& attrs) {
  if (recording) {
    call(launch, {stream.ptr(), cost, name, op_type, fields, attrs.ptr()});
  } else {
    call(launch, {stream.ptr(), cost, name, op_type});
  }
}

// What a learned launch runs in: the device's objects, the compile cache and whether the
// device records.
struct LaunchContext {
  py::object npu;
  py::object compiled;
  bool recording = false;
  //: the compile cache's attributes the task rows take while recording (else None)
  py::object attrs;
};

// Whether adapter ``state`` is inside what learned launch ``fast`` covers (no graph capture,
// no L2 modelling, the compile cache and epoch it was learned in, the task fields known when
// recording), and if so what it runs in (``context``).
bool launch_context(const FastLaunch& fast, py::handle state, LaunchContext& context) {
  if (!get(state, s_capture).is_none()) return false;
  context.npu = get(state, s_npu);
  if (!get(context.npu, s_l2).is_none()) return false;
  context.compiled = get(state, s_compiled);
  if (!context.compiled.is(fast.compiled)) return false;
  const long long epoch = PyLong_AsLongLong(get(context.compiled, s_epoch).ptr());
  if (epoch == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (epoch != fast.epoch) return false;
  context.recording = truthy(get(objects_of(context.npu).bus, s_active));
  if (context.recording && fast.fields.is_none()) return false;
  context.attrs = context.recording ? get(context.compiled, s_attrs) : py::none();
  return true;
}

// Launch the kernels of learned launch ``fast`` on ``stream`` (after their outputs' memory).
// ``launch``: the engine's launch_kernel, taken before any callback (one may run Python that
// meets another device).
void launch_kernels(const FastLaunch& fast, const py::object& launch, const py::object& stream,
                    const LaunchContext& context) {
  PyObject* kernels = fast.kernels.ptr();
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kernels); ++k) {
    PyObject* kernel = PyTuple_GET_ITEM(kernels, k);
    launch_kernel(launch, stream, PyTuple_GET_ITEM(kernel, 0), fast.name.ptr(),
                  PyTuple_GET_ITEM(kernel, 1), context.recording, fast.fields.ptr(),
                  context.attrs);
  }
}

// Do learned launch ``fast`` for this call: the kernels before the outputs' memory (temporary
// TransData), device memory for each fresh output, then each kernel, as
// backend._finish_native does. False, with nothing done, when the state is outside
// what was learned.
bool fast_launch(const FastLaunch& fast, py::handle state, const HostCall& host) {
  LaunchContext context;
  if (!launch_context(fast, state, context)) return false;
  if (!fast.formats.is_none() &&
      PyTuple_GET_SIZE(fast.formats.ptr()) != static_cast<Py_ssize_t>(host.storages.size())) {
    return false;
  }
  if (!conversions_apply(fast, host)) return false;
  const DeviceObjects& device = objects_of(context.npu);
  const py::object stream = get(state, s_stream);
  // copies: a callback may run Python that meets another device
  const py::object hold = device.hold;
  const py::object launch = device.launch;
  PyObject* before = fast.before.ptr();
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(before); ++k) {
    PyObject* kernel = PyTuple_GET_ITEM(before, k);
    launch_kernel(launch, stream, PyTuple_GET_ITEM(kernel, 0), PyTuple_GET_ITEM(kernel, 2),
                  PyTuple_GET_ITEM(kernel, 1), context.recording, PyTuple_GET_ITEM(kernel, 3),
                  context.attrs);
    if (PyTuple_GET_SIZE(kernel) == kConversionEntry) {  // an input converted for good
      const at::Tensor& input = host.unwrap.npu_inputs[PyLong_AsSsize_t(PyTuple_GET_ITEM(kernel, 4))];
      tag_storage(input.storage().unsafeGetStorageImpl(), PyTuple_GET_ITEM(kernel, 5), device,
                  stream);
    }
  }
  if (!host.storages.empty()) {
    const py::object stream_id = get(stream, s_stream_id);
    for (const auto& [storage, nbytes] : host.storages) {
      const py::int_ size(nbytes);
      set_memory(storage, hold_memory(hold, size.ptr(), stream_id.ptr(), fast.name.ptr()), nbytes);
    }
  }
  if (!fast.formats.is_none()) tag_formats(fast, device, stream, host.storages);
  launch_kernels(fast, launch, stream, context);
  return true;
}

// The learned launch of ``call``'s key done for ``state``; false when there is none or the
// state is outside it.
bool launch_learned(const HostCall& call, py::handle state) {
  if (!call.keyed) return false;
  const auto found = fast_launches.find(call.key);
  if (found == fast_launches.end()) return false;
  // held: the allocator's and engine's callbacks run Python, which may learn() meanwhile
  const std::shared_ptr<const FastLaunch> fast = found->second;
  if (!fast_launch(*fast, state, call)) {
    return false;
  }
  ++learned_launches;
  return true;
}

// Teach the fast launch the launch of key ``key`` (from a found tuple): ``kernels`` ((cost,
// op_type), ...), the task-record ``fields`` (or None), the op's ``name``, the compile cache
// and epoch it was made in, the fresh outputs' ``formats`` (see FastLaunch) and the kernels
// launched ``before`` their memory ((cost, op_type, name, fields), ...).
// Keep ``launch`` under ``key`` (the table emptied first when it is full).
void remember(const std::string& key, FastLaunch launch) {
  if (fast_launches.size() >= kFastLimit) fast_launches.clear();
  fast_launches[key] = std::make_shared<const FastLaunch>(std::move(launch));
}

void learn(py::bytes key, py::tuple kernels, py::object fields, py::object name,
           py::object compiled, int64_t epoch, py::object formats, py::tuple before) {
  remember(std::string(key), FastLaunch{kernels, fields, name, compiled, epoch, formats, before});
}

// Forget every learned launch (what they do depends on a setting that changed:
// torch.npu.config.allow_internal_format).
void forget_launches() { fast_launches.clear(); }

// Turn the fast launch on or off (off: every call returns to Python's path, as before).
void set_fast(bool enabled) {
  fast_enabled = enabled;
  if (!enabled) fast_launches.clear();
}

// The schema value of Python argument ``obj`` for slot ``index`` of ``entry``; false when it is
// outside the plain case (a device, a tensor where none goes, a number for an optional tensor).
bool argument_value(const OpEntry& entry, size_t index, PyObject* obj, c10::IValue& out) {
  const Kind kind = entry.kinds[index];
  if (kind == Kind::kTensor || kind == Kind::kOptionalTensor) {
    const bool optional = kind == Kind::kOptionalTensor;
    if (obj == Py_None) {
      out = c10::IValue();
      return optional;
    }
    if (THPVariable_Check(obj)) {
      out = THPVariable_Unpack(obj);
      return true;
    }
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
    out = at::native::wrapped_scalar_tensor(scalar);
    return true;
  }
  if (kind == Kind::kTensorList) {
    if (!PyList_Check(obj) && !PyTuple_Check(obj)) return false;
    const Py_ssize_t count = PySequence_Fast_GET_SIZE(obj);
    PyObject** values = PySequence_Fast_ITEMS(obj);
    c10::List<at::Tensor> list;
    list.reserve(count);
    for (Py_ssize_t i = 0; i < count; ++i) {
      if (!THPVariable_Check(values[i])) return false;
      list.push_back(THPVariable_Unpack(values[i]));
    }
    out = std::move(list);
    return true;
  }
  if (THPVariable_Check(obj) || THPDevice_Check(obj)) return false;
  try {
    out = torch::jit::toIValue(obj, entry.types[index]);
  } catch (const std::exception&) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// Run op ``op_id`` on the host views of ``args`` and ``kwargs`` (torch's boxed convention:
// keyword-only arguments by name, trailing defaults left out) for adapter state ``state``.
// Returns [result] when the launch was learned and done here (fast_launch); else the found
// tuple backend._finish_native takes (HostCall::python_found); or None when the call is outside
// the plain case or the CPU kernel raised.
py::object run(int op_id, py::tuple args, py::dict kwargs, py::handle state) {
  const OpEntry& entry = ops.at(static_cast<size_t>(op_id));
  const size_t given = static_cast<size_t>(args.size());
  const size_t count = entry.kinds.size();
  if (given > count || !entry.enabled) return py::none();
  std::vector<c10::IValue> arguments(count);
  for (size_t i = 0; i < given; ++i) {
    if (!argument_value(entry, i, PyTuple_GET_ITEM(args.ptr(), i), arguments[i])) {
      return py::none();
    }
  }
  size_t by_name = 0;
  for (size_t i = given; i < count; ++i) {
    PyObject* value = kwargs.empty() ? nullptr : PyDict_GetItem(kwargs.ptr(), entry.names[i]);
    if (value != nullptr) {
      ++by_name;
      if (!argument_value(entry, i, value, arguments[i])) return py::none();
    } else if (entry.defaults[i].has_value()) {
      arguments[i] = *entry.defaults[i];
    } else {
      return py::none();
    }
  }
  if (by_name != kwargs.size()) return py::none();  // a name the schema does not have
  HostCall call;
  const bool widen = entry.widened && truthy(get(state, s_fast));
  if (!host_run(op_id, entry, arguments, call, widen)) return py::none();
  if (launch_learned(call, state)) {
    py::list done(1);
    done[0] = call.python_result();
    return std::move(done);
  }
  return call.python_found();
}

// ---- the boxed kernel ----------------------------------------------------------------------

//: backend.fallback(op, *args, **kwargs): the Python path of every op
py::object python_fallback;
//: backend.finish_call(op, found, args): what Python does after host_run (an unlearned launch)
py::object python_finish;
//: msprof_py.adapter.runtime (its STATE is the adapter state)
py::object runtime_module;
//: npu_kernel may run plain ops itself (off: everything goes to Python's path)
bool kernel_direct = true;

PyObject* s_depth = nullptr;
PyObject* s_direct_sink = nullptr;
PyObject* s_live = nullptr;
PyObject* s_stacks = nullptr;
PyObject* s_modules = nullptr;
PyObject* s_class_path = nullptr;
PyObject* s_instance_path = nullptr;

//: the "none" of the host_events id columns (msprof_py.profile.schema.NO_ID)
constexpr int64_t kNoId = -1;

// The autograd sequence number pairing a forward op with its backward, as the recorder takes
// it (collectors/recorder.py _sequence_number): in backward, the running node's; in forward
// with grad mode on, the number the op's grad_fn got; else none.
int64_t sequence_number() {
  uint64_t number;
  if (const auto node = torch::autograd::get_current_node()) {
    number = node->sequence_nr();
  } else if (c10::GradMode::is_enabled()) {
    number = at::sequence_number::peek();
  } else {
    return kNoId;
  }
  return number < (uint64_t{1} << 63) ? static_cast<int64_t>(number) : kNoId;
}

//: argument shape and dtype texts (the host_events input_shapes/input_dtypes columns) by the
//: sizes and dtypes they were made from; emptied when it holds kTextLimit
std::unordered_map<std::string, std::pair<py::object, py::object>> arg_texts;
constexpr size_t kTextLimit = 65536;

// The shapes and dtypes texts of the tensors the op gets positionally in Python (the recorder's
// _arg_shapes: "2,3;3" and "float32;float32"); wrapped numbers are Python numbers there.
const std::pair<py::object, py::object>& tensor_texts(const std::vector<const at::Tensor*>& shown);

const std::pair<py::object, py::object>& argument_texts(const c10::FunctionSchema& schema,
                                                        const std::vector<c10::IValue>& arguments) {
  const size_t positional = positional_count(schema, arguments);
  std::vector<const at::Tensor*> shown;
  for (size_t i = 0; i < positional; ++i) {
    if (!arguments[i].isTensor()) continue;
    const at::Tensor& t = arguments[i].toTensor();
    if (t.defined() && !t.unsafeGetTensorImpl()->is_wrapped_number()) shown.push_back(&t);
  }
  return tensor_texts(shown);
}

//: a direct-mapped front of arg_texts: each slot keeps the last key that hashed to it (the
//: tensors' tensor_key_values) and its texts, so that a recorded op whose arguments' dtypes and
//: sizes were seen makes, hashes and looks up no key string
struct TextSlot {
  std::vector<int64_t> key;
  std::pair<py::object, py::object> texts;
};
constexpr int kTextFrontBits = 8;
std::array<TextSlot, size_t{1} << kTextFrontBits> text_front;
//: the key being looked up (kept: no allocation once it has grown)
std::vector<int64_t> text_key;

// The texts of ``key`` (the tensor_key_values of ``shown``) in arg_texts, made if new.
const std::pair<py::object, py::object>& texts_made(const std::vector<int64_t>& key,
                                                    const std::vector<const at::Tensor*>& shown) {
  std::string bytes(reinterpret_cast<const char*>(key.data()), key.size() * sizeof(int64_t));
  auto found = arg_texts.find(bytes);
  if (found != arg_texts.end()) return found->second;
  std::string shapes;
  std::string dtypes;
  bool first = true;
  for (const at::Tensor* tensor : shown) {
    const at::Tensor& t = *tensor;
    if (!first) {
      shapes += ';';
      dtypes += ';';
    }
    first = false;
    bool first_size = true;
    for (const int64_t size : t.sizes()) {
      if (!first_size) shapes += ',';
      first_size = false;
      shapes += std::to_string(size);
    }
    dtypes += torch::getTHPDtype(t.scalar_type())->name;
  }
  if (arg_texts.size() >= kTextLimit) arg_texts.clear();
  return arg_texts
      .emplace(std::move(bytes), std::make_pair(py::str(shapes), py::str(dtypes)))
      .first->second;
}

// The shapes and dtypes texts of tensors ``shown``, in order (cached by their sizes and dtypes).
const std::pair<py::object, py::object>& tensor_texts(const std::vector<const at::Tensor*>& shown) {
  std::vector<int64_t>& key = text_key;
  key.clear();
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a over the values, then a final mix
  const auto put_value = [&](int64_t value) {
    key.push_back(value);
    hash = (hash ^ static_cast<uint64_t>(value)) * 0x100000001b3ULL;
  };
  for (const at::Tensor* t : shown) tensor_key_values(*t, put_value);
  hash ^= hash >> 29;
  hash *= 0xbf58476d1ce4e5b9ULL;
  hash ^= hash >> 32;
  TextSlot& slot = text_front[hash & ((size_t{1} << kTextFrontBits) - 1)];
  if (slot.texts.first && slot.key == key) return slot.texts;
  const auto& texts = texts_made(key, shown);
  slot.key = key;
  slot.texts = texts;
  return slot.texts;
}

//: the row sink's C calls (msprof_device_core's row_api capsule), or null: every recorded op
//: takes Python's path
const MsprofRowApi* row_api = nullptr;

// Take the row sink's C calls from ``capsule`` (msprof_device_core.row_api).
void install_row_api(const py::capsule& capsule) {
  auto* api = static_cast<const MsprofRowApi*>(
      PyCapsule_GetPointer(capsule.ptr(), MSPROF_ROW_API_NAME));
  if (api == nullptr) throw py::error_already_set();
  if (api->version != MSPROF_ROW_API_VERSION) {
    throw std::runtime_error("the device core's row calls are version " +
                             std::to_string(api->version) + ", this path expects " +
                             std::to_string(MSPROF_ROW_API_VERSION));
  }
  row_api = api;
}

// What a recorder gives every host op, read once per recorder (a Recorder sets them when it is
// made and never replaces them): its row sink and its module stack, and whether a direct call
// can stand for it (the row sink is the live row state, its C calls can write through it and
// no stacks are recorded).
struct RecorderObjects {
  py::object recorder;
  py::object sink;
  py::object modules;
  bool direct = false;
};
RecorderObjects recorder_objects;

// ``recorder``'s objects (read when it is not the one read last); throws the Python error.
const RecorderObjects& objects_of_recorder(const py::object& recorder) {
  if (recorder_objects.recorder.is(recorder)) return recorder_objects;
  RecorderObjects found;
  PyObject* sink = nullptr;
  if (lookup(recorder.ptr(), s_direct_sink, &sink) != 1) {
    PyErr_Clear();  // not a recorder with a row sink: Python's path
  } else {
    found.sink = py::reinterpret_steal<py::object>(sink);
    found.direct = row_api != nullptr && row_api->usable(found.sink.ptr()) != 0 &&
                   get(recorder, s_live).is(found.sink) && get(recorder, s_stacks).is_none();
  }
  if (found.direct) found.modules = get(recorder, s_modules);
  found.recorder = recorder;
  recorder_objects = std::move(found);
  return recorder_objects;
}

// The host op a direct call opens for the op observer (the recorder), as AdapterState.enter
// and leave do with Recorder.op_begin and op_end: its row is written by the recorder's row
// sink. Nested calls (a Python path calling ops) open none. While open, the adapter state's
// depth says a call is under way, so that Python run meanwhile (finishing the launch) opens no
// other.
class HostOp {
 public:
  // Whether this can stand for ``observer`` (the recorder with its row sink, no stacks
  // recorded; anything else takes Python's path). Changes nothing.
  bool can_open(const py::object& state, const py::object& observer) {
    const py::object depth = get(state, s_depth);
    if (!PyLong_CheckExact(depth.ptr())) return false;
    nested_ = PyLong_AsLong(depth.ptr()) != 0;
    if (nested_) return true;  // a Python path's own call: no host op of its own
    const RecorderObjects& objects = objects_of_recorder(observer);
    if (!objects.direct) return false;
    sink_ = objects.sink;
    modules_ = objects.modules;
    return true;
  }

  // Open the host op of ``entry`` called with ``arguments`` (after can_open).
  void open(const py::object& state, const OpEntry& entry, const c10::FunctionSchema& schema,
            const std::vector<c10::IValue>& arguments) {
    open_texts(state, entry.name,
               [&]() -> const auto& { return argument_texts(schema, arguments); });
  }

  // Open host op ``name`` whose arguments are tensors ``shown`` (after can_open).
  void open_tensors(const py::object& state, const py::object& name,
                    const std::vector<const at::Tensor*>& shown) {
    open_texts(state, name, [&]() -> const auto& { return tensor_texts(shown); });
  }

 private:
  // Open host op ``name``; ``texts()`` gives its arguments' shapes and dtypes texts (asked only
  // while recording).
  template <typename Texts>
  void open_texts(const py::object& state, const py::object& name, Texts texts) {
    if (nested_) return;
    PyObject* sink = sink_.ptr();
    if (!row_api->ops_on(sink)) {
      row_api->op_close(sink);
    } else {
      const auto& [shapes, dtypes] = texts();
      const py::object class_path = get(modules_, s_class_path);
      const py::object instance_path = get(modules_, s_instance_path);
      if (row_api->op_begin(sink, name.ptr(), shapes.ptr(), dtypes.ptr(), class_path.ptr(),
                            sequence_number(), instance_path.ptr()) != 0) {
        throw py::error_already_set();
      }
    }
    const py::int_ inside(1);
    if (PyObject_SetAttr(state.ptr(), s_depth, inside.ptr()) != 0) throw py::error_already_set();
    state_ = state;
  }

 public:
  // The op returned (or raised): the adapter state's depth back, the host op's row.
  void close() {
    if (!state_) return;
    const py::object state = std::move(state_);
    const py::int_ outside(0);
    if (PyObject_SetAttr(state.ptr(), s_depth, outside.ptr()) != 0) throw py::error_already_set();
    if (row_api->op_end(sink_.ptr()) != 0) throw py::error_already_set();
  }

 private:
  bool nested_ = false;
  py::object state_;
  py::object sink_;
  py::object modules_;
};

// A view op's Meta kernel on the npu tensors in ``arguments`` (what backend.fallback does for
// OpPlan.view), inside its host op; its errors are torch's own.
void run_view(const c10::OperatorHandle& op, const OpEntry& entry,
              const std::vector<c10::IValue>& arguments, torch::jit::Stack* stack,
              const py::object& state, const py::object& observer, HostOp& host_op) {
  ++direct_runs;
  if (!observer.is_none()) {
    host_op.open(state, entry, op.schema(), arguments);
    ++recorded_runs;
  }
  try {
    stack->insert(stack->end(), arguments.begin(), arguments.end());
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), stack);
  } catch (...) {
    host_op.close();
    throw;
  }
  host_op.close();
}

// The adapter state when an op may run here: installed, modelled host time (measured host time
// is charged from Python) and the compiled path chosen (not numerics "none", which has a path
// of its own); None otherwise.
py::object direct_state() {
  py::object state = get(runtime_module, s_state);
  if (state.is_none() || truthy(get(state, s_measured)) || !truthy(get(state, s_native))) {
    return py::none();
  }
  return state;
}

// Run a plain op here (numerics "cpu" or "fast", modelled host time, the recorder or nothing
// observing): the host half (host_run), the host op's row, then the learned launch or Python's
// finish.
// False, with nothing done, when it is not such a call.
bool run_direct(const c10::OperatorHandle& op, const std::vector<c10::IValue>& arguments,
                torch::jit::Stack* stack) {
  const auto found = op_ids.find(&op.schema());
  if (found == op_ids.end()) return false;
  const int op_id = found->second;
  const OpEntry& entry = ops[static_cast<size_t>(op_id)];
  if (!entry.enabled || c10::impl::TorchDispatchModeTLS::stack_len() > 0) return false;
  const py::object state = direct_state();
  if (state.is_none()) return false;
  const py::object observer = get(state, s_observer);
  HostOp host_op;
  if (!observer.is_none() && !host_op.can_open(state, observer)) return false;
  if (entry.view) {
    run_view(op, entry, arguments, stack, state, observer, host_op);
    return true;
  }
  HostCall call;
  const bool widen = entry.widened && truthy(get(state, s_fast));
  if (!host_run(op_id, entry, arguments, call, widen)) return false;
  // the CPU kernel changed no device state: the host op opens at the clock it would have
  // opened at before it
  ++direct_runs;
  if (!observer.is_none()) {
    host_op.open(state, entry, op.schema(), arguments);
    ++recorded_runs;
  }
  try {
    if (!launch_learned(call, state)) {
      const py::tuple args = python_arguments(op.schema(), arguments).first;
      const py::object out =
          python_finish(torch::detail::getTorchApiFunction(op), call.python_found(), args);
      push_python_result(op, stack, out);
    } else {
      for (auto& value : call.returns) torch::jit::push(stack, std::move(value));
    }
  } catch (...) {
    host_op.close();
    throw;
  }
  host_op.close();
  return true;
}

// The boxed PrivateUse1 kernel of every op install_kernels() registers it for.
void npu_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  py::gil_scoped_acquire gil;
  TORCH_CHECK(python_fallback, "the npu device is shut down: ", op.operator_name(), " ran after exit");
  std::vector<c10::IValue> arguments = torch::jit::pop(*stack, op.schema().arguments().size());
  try {
    if (kernel_direct && run_direct(op, arguments, stack)) return;
    auto [args, kwargs] = python_arguments(op.schema(), arguments);
    py::tuple call_args(args.size() + 1);
    PyTuple_SET_ITEM(call_args.ptr(), 0,
                     py::reinterpret_borrow<py::object>(torch::detail::getTorchApiFunction(op))
                         .release()
                         .ptr());
    for (size_t i = 0; i < args.size(); ++i) {
      PyTuple_SET_ITEM(call_args.ptr(), i + 1, py::object(args[i]).release().ptr());
    }
    PyObject* out = PyObject_Call(python_fallback.ptr(), call_args.ptr(), kwargs.ptr());
    if (out == nullptr) throw python_error();
    push_python_result(op, stack, py::reinterpret_steal<py::object>(out));
  } catch (py::error_already_set& error) {
    error.restore();
    throw python_error();
  }
}

// ---- factories -----------------------------------------------------------------------------

//: the Python kernels (msprof_py/adapter/kernels.py) of the factories npu_factory makes, by
//: overload name ("memory_format" for aten::empty, "" for aten::empty_strided): they run
//: every call outside the plain case
std::unordered_map<std::string, py::object> python_factories;
PyObject* empty_tag = nullptr;
PyObject* empty_strided_tag = nullptr;

// A new npu tensor of ``sizes``, ``strides`` (none negative) and ``dtype``, made as
// tensors.new_tensor makes it: device memory held first under ``tag`` (so a request the device
// cannot hold fails as an npu out-of-memory error before host memory is touched), then the host
// tensor (``host``), adopted.
at::Tensor new_npu_tensor(const py::object& state, const std::vector<int64_t>& sizes,
                          const std::vector<int64_t>& strides, at::ScalarType dtype,
                          PyObject* tag, at::Tensor& host) {
  int64_t elements = 1;  // what the storage spans: tensors.new_tensor's count
  bool none = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    none = none || sizes[i] == 0;
    elements += (sizes[i] - 1) * strides[i];
  }
  if (none) elements = 0;
  const DeviceObjects& device = objects_of(get(state, s_npu));
  const py::object stream_id = get(get(state, s_stream), s_stream_id);
  const py::int_ size(elements * static_cast<int64_t>(c10::elementSize(dtype)));
  const py::object held = hold_memory(device.hold, size.ptr(), stream_id.ptr(), tag);
  host = at::empty_strided(sizes, strides, at::TensorOptions().dtype(dtype));
  at::Tensor out = adopt(host);
  set_memory(out.storage().unsafeGetStorageImpl(), held,
             static_cast<int64_t>(host.storage().nbytes()));
  return out;
}

// A new npu tensor for ``torch.empty`` (``empty.memory_format``, contiguous) or
// ``torch.empty_strided`` (new_npu_tensor, its memory held under the op's name). False, with
// nothing done, outside the plain case: no adapter state, a graph being captured, numerics
// "none" or the Python path chosen, symbolic or negative sizes or strides, a memory format
// other than contiguous.
bool make_factory(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& arguments,
                  torch::jit::Stack* stack) {
  if (!kernel_direct) return false;
  const py::object state = get(runtime_module, s_state);
  if (state.is_none() || !get(state, s_capture).is_none() || !truthy(get(state, s_native))) {
    return false;
  }
  const bool strided = schema.overload_name().empty();
  if (!arguments[0].isIntList() || (strided && !arguments[1].isIntList())) return false;
  const std::vector<int64_t> sizes = arguments[0].toIntVector();
  std::vector<int64_t> strides;
  if (strided) {
    strides = arguments[1].toIntVector();
    if (strides.size() != sizes.size()) return false;
  } else {
    const c10::IValue& format = arguments[5];
    if (!format.isNone() && format.toMemoryFormat() != c10::MemoryFormat::Contiguous &&
        format.toMemoryFormat() != c10::MemoryFormat::Preserve) {
      return false;
    }
    strides.resize(sizes.size());  // tensors._contiguous_strides
    int64_t running = 1;
    for (size_t i = sizes.size(); i-- > 0;) {
      strides[i] = running;
      running *= std::max<int64_t>(sizes[i], 1);
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || strides[i] < 0) return false;
  }
  const c10::IValue& dtype_value = arguments[strided ? 2 : 1];
  const at::ScalarType dtype = dtype_value.isNone()
                                   ? c10::typeMetaToScalarType(c10::get_default_dtype())
                                   : dtype_value.toScalarType();
  at::Tensor host;
  torch::jit::push(stack, new_npu_tensor(state, sizes, strides, dtype,
                                         strided ? empty_strided_tag : empty_tag, host));
  return true;
}

// The PrivateUse1 kernel of the factories install_factories() registers: made here in the
// plain case, else by their Python kernels.
// Call Python kernel ``kernel`` of ``op`` with ``arguments`` as torch hands them to a Python
// kernel, its result pushed on ``stack``; throws the Python error.
void call_python_kernel(const py::object& kernel, const c10::OperatorHandle& op,
                        const std::vector<c10::IValue>& arguments, torch::jit::Stack* stack) {
  auto [args, kwargs] = python_arguments(op.schema(), arguments);
  PyObject* out = PyObject_Call(kernel.ptr(), args.ptr(), kwargs.ptr());
  if (out == nullptr) throw python_error();
  push_python_result(op, stack, py::reinterpret_steal<py::object>(out));
}

void npu_factory(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  py::gil_scoped_acquire gil;
  const c10::FunctionSchema& schema = op.schema();
  std::vector<c10::IValue> arguments = torch::jit::pop(*stack, schema.arguments().size());
  try {
    if (make_factory(schema, arguments, stack)) return;
    const auto found = python_factories.find(schema.overload_name());
    TORCH_CHECK(found != python_factories.end(), "the npu device is shut down: ",
                op.operator_name(), " ran after exit");
    call_python_kernel(found->second, op, arguments, stack);
  } catch (py::error_already_set& error) {
    error.restore();
    throw python_error();
  }
}

// Register npu_factory as the PrivateUse1 kernel of aten::empty.memory_format and
// aten::empty_strided, whose Python kernels are ``empty`` and ``empty_strided``. Once per
// process, after install_kernels().
void install_factories(py::object empty, py::object empty_strided) {
  TORCH_CHECK(runtime_module, "install_kernels() first");
  TORCH_CHECK(python_factories.empty(), "the npu factories are installed already");
  python_factories.emplace("memory_format", std::move(empty));
  python_factories.emplace("", std::move(empty_strided));
  auto* aten = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                  __FILE__, __LINE__);
  aten->impl("empty.memory_format", torch::CppFunction::makeFromBoxedFunction<&npu_factory>());
  aten->impl("empty_strided", torch::CppFunction::makeFromBoxedFunction<&npu_factory>());
}

// ---- casts on the device -------------------------------------------------------------------

//: kernels.to_copy, the Python kernel of aten::_to_copy: every call outside the learned cast
py::object python_to_copy;

// The dtype an aten::_to_copy call (self, dtype, layout, device, pin_memory, non_blocking,
// memory_format) casts a contiguous npu tensor to on the npu, keeping its strides (the case
// kernels.to_copy learns); nullopt for any other call (another device, layout or memory format,
// pinned memory, no dtype change, a strided source).
std::optional<at::ScalarType> device_cast_dtype(const std::vector<c10::IValue>& arguments) {
  if (arguments.size() != 7 || !arguments[0].isTensor() || arguments[1].isNone()) {
    return std::nullopt;
  }
  const at::Tensor& src = arguments[0].toTensor();
  if (!src.defined() || src.device().type() != c10::DeviceType::PrivateUse1 ||
      !src.is_contiguous()) {
    return std::nullopt;
  }
  const at::ScalarType dtype = arguments[1].toScalarType();
  const c10::IValue& layout = arguments[2];
  const c10::IValue& device = arguments[3];
  const c10::IValue& pinned = arguments[4];
  const c10::IValue& format = arguments[6];
  const bool other_device =
      !device.isNone() && (device.toDevice().type() != c10::DeviceType::PrivateUse1 ||
                           (device.toDevice().has_index() && device.toDevice().index() != 0));
  if (dtype == src.scalar_type() || other_device ||
      (!layout.isNone() && layout.toLayout() != c10::kStrided) ||
      (!pinned.isNone() && pinned.toBool()) ||
      (!format.isNone() && format.toMemoryFormat() != c10::MemoryFormat::Preserve)) {
    return std::nullopt;
  }
  return dtype;
}

// The key a cast's launch is learned by: its source's dtype, sizes and storage format (as
// put_format gives it) and the dtype it is cast to; ``host``: the source's host view. False
// when the source is outside the plain case or its format cannot be read.
bool cast_key(const at::Tensor& src, at::ScalarType dtype, at::Tensor& host, std::string& key) {
  Unwrapper unwrap;
  if (!unwrap.host_value(src, host) || !unwrap.formats_known) return false;
  put(key, -3);  // no op id
  put_tensor(key, src);
  put(key, static_cast<int64_t>(dtype));
  key.append(unwrap.formats.begin(), unwrap.formats.end());
  return true;
}

// The adapter state when a cast or copy may run here (the compiled kernels and learned launches
// on, no dispatch mode, direct_state()); None otherwise.
py::object copy_state() {
  if (!kernel_direct || !fast_enabled || c10::impl::TorchDispatchModeTLS::stack_len() > 0) {
    return py::none();
  }
  return direct_state();
}

// A learned cast or copy done here: its launch, and what doing it for the adapter state takes.
class DeviceCopy {
 public:
  // Take the launch learned by ``key``; false when there is none, the state is outside what it
  // covers (launch_context) or the observer is one the compiled host op cannot stand for.
  bool find(const std::string& key, const py::object& state) {
    const auto found = fast_launches.find(key);
    if (found == fast_launches.end()) return false;
    fast_ = found->second;  // held: callbacks run Python, which may learn() meanwhile
    if (!launch_context(*fast_, state, context_)) return false;
    observer_ = get(state, s_observer);
    if (!observer_.is_none() && !host_op_.can_open(state, observer_)) return false;
    launch_ = objects_of(context_.npu).launch;
    stream_ = get(state, s_stream);
    return true;
  }

  const FastLaunch& fast() const { return *fast_; }
  const LaunchContext& context() const { return context_; }
  const py::object& stream() const { return stream_; }

  // The host op (``src`` into ``dst``) around the launch and the values copied on the host from
  // ``src_host`` into ``dst_host``; ``dst`` pushed on ``stack``.
  void run(const py::object& state, const at::Tensor& src, const at::Tensor& dst,
           at::Tensor& dst_host, const at::Tensor& src_host, torch::jit::Stack* stack) {
    ++host_runs;
    ++learned_launches;
    ++direct_runs;
    if (!observer_.is_none()) {
      host_op_.open_tensors(state, fast_->name, {&src, &dst});
      ++recorded_runs;
    }
    try {
      launch_kernels(*fast_, launch_, stream_, context_);
      dst_host.copy_(src_host);
    } catch (...) {
      host_op_.close();
      throw;
    }
    host_op_.close();
    torch::jit::push(stack, dst);
  }

 private:
  std::shared_ptr<const FastLaunch> fast_;
  LaunchContext context_;
  py::object observer_;
  HostOp host_op_;
  py::object launch_;
  py::object stream_;
};

// Run an npu -> npu dtype cast here once its launch is learned (learn_cast), as kernels.to_copy
// runs it: the result made as empty_strided makes it, in the source's strides, and tagged with
// the source's private format where the cast keeps it; then the aten::copy_ host op around the
// Cast kernel's launch and the values cast on the host. False, with nothing done, for any
// other call or state (numerics "none", a graph capture, measured host time, a dispatch mode,
// an observer other than the recorder with its row sink, a launch not learned or learned in
// another state).
bool run_cast(const std::vector<c10::IValue>& arguments, torch::jit::Stack* stack) {
  const auto dtype = device_cast_dtype(arguments);
  if (!dtype.has_value()) return false;
  const py::object state = copy_state();
  if (state.is_none()) return false;
  const at::Tensor& src = arguments[0].toTensor();
  at::Tensor src_host;
  std::string key;
  DeviceCopy copy;
  if (!cast_key(src, *dtype, src_host, key) || !copy.find(key, state)) return false;
  at::Tensor host;
  const at::Tensor dst = new_npu_tensor(state, src.sizes().vec(), src.strides().vec(), *dtype,
                                        empty_strided_tag, host);
  if (!copy.fast().formats.is_none()) {
    Storages storages;
    storages.emplace_back(dst.storage().unsafeGetStorageImpl(),
                          static_cast<int64_t>(host.storage().nbytes()));
    tag_formats(copy.fast(), objects_of(copy.context().npu), copy.stream(), storages);
  }
  copy.run(state, src, dst, host, src_host, stack);
  return true;
}

// The PrivateUse1 kernel of a copy op (aten::_to_copy, aten::_copy_from): ``Run`` does a learned
// one here, the Python kernel ``*Python`` (kernels.to_copy, kernels.copy_from) anything else.
template <bool (*Run)(const std::vector<c10::IValue>&, torch::jit::Stack*), py::object* Python>
void npu_copy_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  py::gil_scoped_acquire gil;
  std::vector<c10::IValue> arguments = torch::jit::pop(*stack, op.schema().arguments().size());
  try {
    if (Run(arguments, stack)) return;
    TORCH_CHECK(*Python, "the npu device is shut down: ", op.operator_name(), " ran after exit");
    call_python_kernel(*Python, op, arguments, stack);
  } catch (py::error_already_set& error) {
    error.restore();
    throw python_error();
  }
}

//: kernels.copy_from, the Python kernel of aten::_copy_from: every call outside the learned copy
py::object python_copy_from;

// The key the launch of copying npu tensor ``src`` into npu tensor ``dst`` by a kernel (a
// ViewCopy, or a Cast between dtypes) is learned by: both tensors' dtypes and sizes; ``*_host``
// their host views. False when either is outside the plain case or held in a private format
// (the copy then converts it with a TransData first), or when the copy is a plain one (same
// dtype and sizes, both contiguous: a D2D DMA task rather than a kernel).
bool copy_key(const at::Tensor& src, const at::Tensor& dst, at::Tensor& src_host,
              at::Tensor& dst_host, std::string& key) {
  if (src.scalar_type() == dst.scalar_type() && src.sizes() == dst.sizes() &&
      src.is_contiguous() && dst.is_contiguous()) {
    return false;
  }
  Unwrapper unwrap;
  if (!unwrap.host_value(src, src_host) || !unwrap.host_value(dst, dst_host) ||
      unwrap.formatted) {
    return false;
  }
  put(key, -4);  // no op id
  put_tensor(key, src);
  put_tensor(key, dst);
  return true;
}

// Run a copy between npu tensors by a kernel (``aten::_copy_from(src, dst, non_blocking)``, what
// ``dst.copy_(src)`` calls) here once its launch is learned (learn_copy), as kernels.copy_from
// runs it: the aten::copy_ host op around the kernel's launch and the values copied on the
// host. False, with nothing done, for any other call or state (as run_cast).
bool run_copy(const std::vector<c10::IValue>& arguments, torch::jit::Stack* stack) {
  if (arguments.size() != 3 || !arguments[0].isTensor() || !arguments[1].isTensor()) {
    return false;
  }
  const at::Tensor& src = arguments[0].toTensor();
  const at::Tensor& dst = arguments[1].toTensor();
  const auto on_npu = [](const at::Tensor& t) {
    return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
  };
  if (!on_npu(src) || !on_npu(dst)) return false;
  const py::object state = copy_state();
  if (state.is_none()) return false;
  at::Tensor src_host;
  at::Tensor dst_host;
  std::string key;
  DeviceCopy copy;
  if (!copy_key(src, dst, src_host, dst_host, key) || !copy.find(key, state)) return false;
  copy.run(state, src, dst, dst_host, src_host, stack);
  return true;
}

// Register npu_copy_kernel as the PrivateUse1 kernel of aten::_to_copy (run_cast) and of
// aten::_copy_from (run_copy), whose Python kernels are ``to_copy`` and ``copy_from``. Once per
// process, after install_kernels().
void install_copies(py::object to_copy, py::object copy_from) {
  TORCH_CHECK(runtime_module, "install_kernels() first");
  TORCH_CHECK(!python_to_copy, "the npu copies are installed already");
  python_to_copy = std::move(to_copy);
  python_copy_from = std::move(copy_from);
  auto* aten = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                  __FILE__, __LINE__);
  aten->impl("_to_copy", torch::CppFunction::makeFromBoxedFunction<
                             &npu_copy_kernel<&run_cast, &python_to_copy>>());
  aten->impl("_copy_from", torch::CppFunction::makeFromBoxedFunction<
                               &npu_copy_kernel<&run_copy, &python_copy_from>>());
}

// Teach run_cast the launch of casting npu tensor ``src`` to ``dtype`` (kernels.to_copy, after
// running it): ``kernels``, ``fields``, ``name``, ``compiled``, ``epoch`` and the result's
// ``formats`` as learn() takes them. False, with nothing learned, when ``src`` is outside the
// plain case.
bool learn_cast(const at::Tensor& src, py::object dtype, py::tuple kernels, py::object fields,
                py::object name, py::object compiled, int64_t epoch, py::object formats) {
  if (!THPDtype_Check(dtype.ptr())) return false;
  const auto scalar_type = reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
  at::Tensor host;
  std::string key;
  if (!fast_enabled || !cast_key(src, scalar_type, host, key)) return false;
  remember(key, FastLaunch{kernels, fields, name, compiled, epoch, formats, py::tuple()});
  return true;
}

// Teach run_copy the launch of copying npu tensor ``src`` into npu tensor ``dst`` by a kernel
// (kernels.copy_from, after running it), as learn_cast takes it (no formats: neither tensor is
// held in one). False, with nothing learned, when the copy is outside the case run_copy runs.
bool learn_copy(const at::Tensor& src, const at::Tensor& dst, py::tuple kernels,
                py::object fields, py::object name, py::object compiled, int64_t epoch) {
  at::Tensor src_host;
  at::Tensor dst_host;
  std::string key;
  if (!fast_enabled || !copy_key(src, dst, src_host, dst_host, key)) return false;
  remember(key, FastLaunch{kernels, fields, name, compiled, epoch, py::none(), py::tuple()});
  return true;
}

// Register npu_kernel as the PrivateUse1 backend fallback and as the PrivateUse1 kernel of
// each op in ``whole_ops`` ("add.Tensor" ...: ops that run whole rather than decompose);
// ``fallback`` and ``finish`` are backend.fallback and backend.finish_call, ``runtime`` the
// module holding the adapter state. Once per process.
void install_kernels(py::object fallback, py::object finish, py::object runtime,
                     const std::vector<std::string>& whole_ops) {
  TORCH_CHECK(!python_fallback, "the npu kernels are installed already");
  python_fallback = std::move(fallback);
  python_finish = std::move(finish);
  runtime_module = std::move(runtime);
  // kept for the life of the process, as torch keeps the Python libraries' registrations
  auto* backend = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1,
                                     __FILE__, __LINE__);
  backend->fallback(torch::CppFunction::makeFromBoxedFunction<&npu_kernel>());
  auto* aten = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                  __FILE__, __LINE__);
  for (const auto& name : whole_ops) {
    aten->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&npu_kernel>());
  }
}

// ---- multi-tensor (foreach) ops --------------------------------------------------------------

PyObject* s_spec = nullptr;
PyObject* s_a2_class = nullptr;

// Whether a scalar argument beside tensors of the call's dtype would change it (a complex
// number; a float beside integer tensors).
bool foreach_promotes(const c10::IValue& value, bool floating) {
  if (value.isComplexDouble()) return true;
  return value.isDouble() && !floating;
}

// Whether torch_npu runs a foreach call with ``arguments`` as multi-tensor kernels: the
// fast_route() of msprof_py/adapter/foreach.py, which the Python path runs (tests hold the
// two together): an A2-class chip, tensor lists of one length and of one float dtype on the
// npu, each tensor dense, the tensors at each index of the same sizes and strides, a scalar
// tensor one npu value of the dtype, no scalar that would promote the dtype; a norm
// (``norm``: the op is aten::_foreach_norm) of order 1 or 2 only.
bool foreach_fast_route(c10::ArrayRef<c10::IValue> arguments, bool norm) {
  const py::object state = get(runtime_module, s_state);
  if (state.is_none() || !truthy(get(get(get(state, s_npu), s_spec), s_a2_class))) return false;
  if (norm && arguments.size() > 1) {
    const c10::IValue& order = arguments[1];
    if (order.isBool() || !(order.isInt() || order.isDouble())) return false;
    const double p = order.isInt() ? static_cast<double>(order.toInt()) : order.toDouble();
    if (p != 1.0 && p != 2.0) return false;
  }
  std::vector<c10::List<at::Tensor>> lists;
  for (const c10::IValue& value : arguments) {
    if (value.isTensorList()) {
      c10::List<at::Tensor> items = value.toTensorList();
      if (!items.empty()) lists.push_back(std::move(items));
    }
  }
  if (lists.empty()) return false;
  const at::Tensor head = lists[0].get(0);
  const at::ScalarType dtype = head.scalar_type();
  if (dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16) return false;
  const size_t n = lists[0].size();
  for (const auto& items : lists) {
    if (items.size() != n) return false;
  }
  const auto on_npu = [](const at::Tensor& t) {
    return t.device().type() == c10::DeviceType::PrivateUse1;
  };
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor t = lists[0].get(i);
    if (t.scalar_type() != dtype || !on_npu(t) || !t.is_non_overlapping_and_dense()) return false;
    for (size_t k = 1; k < lists.size(); ++k) {
      const at::Tensor u = lists[k].get(i);
      if (u.scalar_type() != dtype || !on_npu(u) || u.sizes() != t.sizes() ||
          u.strides() != t.strides()) {
        return false;
      }
    }
  }
  const bool floating = at::isFloatingType(dtype);
  for (const c10::IValue& value : arguments) {
    if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      if (t.scalar_type() != dtype || t.numel() != 1 || !on_npu(t)) return false;
    } else if (value.isList()) {
      for (const c10::IValue& item : value.toListRef()) {
        if (foreach_promotes(item, floating)) return false;
      }
    } else if (value.isDoubleList()) {
      if (!floating && !value.toDoubleVector().empty()) return false;
    } else if (value.isComplexDoubleList()) {
      if (!value.toComplexDoubleVector().empty()) return false;
    } else if (foreach_promotes(value, floating)) {
      return false;
    }
  }
  return true;
}

// The PrivateUse1 kernel of the foreach ops install_foreach() registers it for: on the fast
// route npu_kernel runs the whole op (one host op, its multi-tensor kernels); otherwise the
// op's CompositeExplicitAutograd kernel, PyTorch's per-tensor loop.
void npu_foreach_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  bool fast = false;
  {
    py::gil_scoped_acquire gil;
    try {
      fast = foreach_fast_route(torch::jit::last(*stack, op.schema().arguments().size()),
                                op.schema().name() == "aten::_foreach_norm");
    } catch (py::error_already_set& error) {
      error.restore();
      throw python_error();
    }
  }
  if (fast) {
    npu_kernel(op, stack);
    return;
  }
  c10::Dispatcher::singleton().callBoxedForDispatchKey(
      op, c10::DispatchKey::CompositeExplicitAutograd, stack);
}

// Register npu_foreach_kernel as the PrivateUse1 kernel of each op in ``names``
// ("_foreach_add_.List" ...). Once per process, after install_kernels().
void install_foreach(const std::vector<std::string>& names) {
  TORCH_CHECK(runtime_module, "install_kernels() first");
  auto* aten = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                  __FILE__, __LINE__);
  for (const auto& name : names) {
    aten->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&npu_foreach_kernel>());
  }
}

// Whether foreach op ``name``.``overload`` called with ``args`` and ``kwargs`` takes the fast
// route (for tests: foreach.fast_route() must say the same).
bool foreach_route(const std::string& name, const std::string& overload, py::tuple args,
                   py::dict kwargs) {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
  auto stack = torch::jit::createStackForSchema(
      handle.schema(), args, py::reinterpret_borrow<py::kwargs>(kwargs), std::nullopt);
  return foreach_fast_route(stack, name == "aten::_foreach_norm");
}

//: tensors.resize_storage_bytes: an npu storage's resize_() (install_storage_resize)
py::object python_resize;

// Resize npu storage ``storage`` to ``newsize`` bytes (its backing, its device memory) through
// Python's tensors.resize_storage_bytes; its errors are raised as torch's.
void resize_npu_storage(const c10::Storage& storage, size_t newsize) {
  py::gil_scoped_acquire gil;
  TORCH_CHECK(python_resize, "the npu device is shut down: an npu storage's resize_ ran after exit");
  try {
    const py::object obj = py::reinterpret_steal<py::object>(THPStorage_Wrap(storage));
    if (!obj) throw py::error_already_set();
    const py::int_ size(newsize);
    call(python_resize, {obj.ptr(), size.ptr()});
  } catch (py::error_already_set& error) {
    error.restore();
    throw python_error();
  }
}

// Resize npu storages with ``resize`` (tensors.resize_storage_bytes) from now on.
void install_storage_resize(py::object resize) {
  python_resize = std::move(resize);
  set_storage_resize(&resize_npu_storage);
}

// Let npu_kernel run plain ops itself, or send every op to Python's path.
void set_direct(bool enabled) { kernel_direct = enabled; }

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

// ---- an npu storage's state from Python (tensors.py) ---------------------------------------

// The npu storage of ``obj``, an npu tensor or the Python object of an npu storage; null for
// anything else.
c10::StorageImpl* npu_storage_of(py::handle obj) {
  c10::StorageImpl* storage = nullptr;
  if (THPVariable_Check(obj.ptr())) {
    const at::Tensor& t = THPVariable_Unpack(obj.ptr());
    if (t.has_storage()) storage = t.storage().unsafeGetStorageImpl();
  } else if (THPStorage_Check(obj.ptr())) {
    storage = THPStorage_Unpack(obj.ptr()).unsafeGetStorageImpl();
  }
  if (storage == nullptr || storage->device_type() != c10::DeviceType::PrivateUse1) return nullptr;
  return storage;
}

c10::StorageImpl* npu_storage_or_throw(py::handle obj) {
  c10::StorageImpl* storage = npu_storage_of(obj);
  if (storage == nullptr) throw py::type_error("expected an npu tensor or storage");
  return storage;
}

// The state of ``obj``'s npu storage (npu_storage_of), or null.
const StorageState* state_of_object(py::handle obj) {
  const c10::StorageImpl* storage = npu_storage_of(obj);
  return storage == nullptr ? nullptr : state_of(storage);
}

py::object borrowed_or_none(PyObject* value) {
  return value == nullptr ? py::none() : py::reinterpret_borrow<py::object>(value);
}

// The backing storage (an UntypedStorage) of ``obj``'s npu storage, or None.
py::object storage_backing(py::handle obj) {
  const StorageState* state = state_of_object(obj);
  if (state == nullptr || !state->backing) return py::none();
  PyObject* wrapped = THPStorage_Wrap(state->backing);
  if (wrapped == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(wrapped);
}

// Make ``backing`` (an UntypedStorage) the backing of ``obj``'s npu storage.
void set_storage_backing(py::handle obj, py::handle backing) {
  if (!THPStorage_Check(backing.ptr())) throw py::type_error("the backing must be a storage");
  StorageState& state = ensure_state(npu_storage_or_throw(obj));
  state.backing = THPStorage_Unpack(backing.ptr());
  drop_views(state);  // made for the backing before
}

// The device memory handle ``obj``'s npu storage holds, or None.
py::object storage_memory(py::handle obj) {
  const StorageState* state = state_of_object(obj);
  return borrowed_or_none(state == nullptr ? nullptr : state->held);
}

// ``(format, logical shape)`` of ``obj``'s npu storage when held in a private format, or None.
py::object storage_format(py::handle obj) {
  const StorageState* state = state_of_object(obj);
  return borrowed_or_none(state == nullptr ? nullptr : state->fmt);
}

// Tag ``obj``'s npu storage as held in private format ``fmt`` (None: the plain layout).
void set_storage_format(py::handle obj, py::handle fmt) {
  StorageState& state = ensure_state(npu_storage_or_throw(obj));
  replace_reference(state.fmt, fmt.is_none() ? nullptr : fmt.ptr());
}

// The Python (args, kwargs) npu_kernel hands a Python kernel for op ``name`` called with
// ``args`` and ``kwargs`` (for tests: torch's own conversion must give the same).
py::tuple boxed_arguments(const std::string& name, const std::string& overload, py::tuple args,
                          py::dict kwargs) {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
  auto stack = torch::jit::createStackForSchema(
      handle.schema(), args, py::reinterpret_borrow<py::kwargs>(kwargs), std::nullopt);
  auto [positional, keywords] = python_arguments(handle.schema(), stack);
  return py::make_tuple(positional, keywords);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  const std::pair<PyObject**, const char*> names[] = {
      {&s_capture, "capture"}, {&s_npu, "npu"},         {&s_l2, "l2"},
      {&s_compiled, "compiled"}, {&s_epoch, "epoch"},   {&s_engine, "engine"},
      {&s_bus, "bus"},         {&s_active, "active"},   {&s_stream, "stream"},
      {&s_stream_id, "stream_id"}, {&s_memory, "memory"}, {&s_hold, "hold"},
      {&s_launch_kernel, "launch_kernel"}, {&s_attrs, "attrs"},
      {&s_state, "STATE"}, {&s_observer, "observer"}, {&s_measured, "measured"},
      {&s_native, "native"}, {&s_fast, "fast"},
      {&s_depth, "_depth"}, {&s_direct_sink, "direct_sink"}, {&s_live, "_live"},
      {&s_stacks, "stacks"}, {&s_modules, "modules"}, {&s_class_path, "class_path"},
      {&s_instance_path, "instance_path"},
      {&s_block_size, "block_size"}, {&s_address, "address"},
      {&s_spec, "spec"}, {&s_a2_class, "a2_class"},
  };
  for (const auto& [slot, text] : names) *slot = PyUnicode_InternFromString(text);
  empty_tag = PyUnicode_InternFromString("aten::empty");
  empty_strided_tag = PyUnicode_InternFromString("aten::empty_strided");
  m.def("abi_version", [] { return kAbiVersion; }, "The contract version run() keeps.");
  m.def("init", &init, "Take the npu storage allocator from an npu tensor torch made.");
  m.def("register_npu_device", &register_npu_device,
        "Register the C++ npu device guard and hooks; whether the guard is ours.");
  // the learned launches and the kernels' Python callables hold Python objects: drop them
  // while Python still runs (an op dispatched after that is an error, not a crash)
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    fast_launches.clear();
    on_oom = py::object();
    device_oom = py::object();
    kernel_direct = false;
    device_objects = DeviceObjects();
    recorder_objects = RecorderObjects();
    python_resize = py::object();
    arg_texts.clear();
    for (TextSlot& slot : text_front) slot = TextSlot();
    python_fallback = py::object();
    python_finish = py::object();
    python_factories.clear();
    python_to_copy = py::object();
    python_copy_from = py::object();
    runtime_module = py::object();
  }));
  m.def("register_op", &register_op, "Register an op overload; its id, or -1.");
  m.def("register_view", &register_view, "Register a view op; its id, or -1.");
  m.def("drop_op", &drop_op, "Send op id to Python's path only.");
  m.def("set_host_op", &set_host_op, "Give op id the CPU op its host half calls.");
  m.def("set_widened", &set_widened, "Mark op id as computed widened under numerics fast.");
  m.def("forget_launches", &forget_launches, "Forget every learned launch.");
  m.def("run", &run, "Run a plain op on host views; [result], a found tuple or None.");
  m.def("learn", &learn, "Teach the fast launch the launch of a key.");
  m.def("set_fast", &set_fast, "Turn the fast launch on or off.");
  m.def("install_kernels", &install_kernels, "Register the boxed npu kernel (once).");
  m.def("install_foreach", &install_foreach,
        "Register the foreach kernel (fast route or per tensor) for these ops (once).");
  m.def("foreach_route", &foreach_route, "Whether a foreach call takes the fast route.");
  m.def("install_factories", &install_factories,
        "Register the npu kernel of empty and empty_strided (once).");
  m.def("install_copies", &install_copies,
        "Register the npu kernels of _to_copy and _copy_from (once).");
  m.def("learn_cast", &learn_cast, "Teach the compiled cast the launch of an npu cast.");
  m.def("learn_copy", &learn_copy, "Teach the compiled copy the launch of an npu copy.");
  m.def("install_row_api", &install_row_api,
        "Write host-op rows through the row sink's C calls (msprof_device_core.row_api).");
  m.def("install_storage_resize", &install_storage_resize,
        "Resize npu storages (resize_) with a Python callable (storage, nbytes).");
  m.def("set_direct", &set_direct, "Let the boxed kernel run plain ops itself, or not.");
  m.def("counts",
        [] {
          return std::make_tuple(host_runs, learned_launches, direct_runs, recorded_runs,
                                 views_made, views_kept);
        },
        "(host halves run here, launches done here, ops the boxed kernel ran, of those recorded, "
        "host views made, host views found kept).");
  m.def("boxed_arguments", &boxed_arguments, "The (args, kwargs) a Python kernel gets.");
  m.def(
      "set_storage_memory",
      [](py::handle obj, py::handle held, int64_t nbytes) {
        set_memory(npu_storage_or_throw(obj), held, nbytes);
      },
      py::arg("storage"), py::arg("held"), py::arg("nbytes") = -1,
      "Give an npu storage device memory (a handle or None), shown as its data pointer, and "
      "its backing's size (nbytes, or looked up) as its nbytes.");
  m.def(
      "adopt", [](const at::Tensor& result) { return adopt(result); },
      "A new npu tensor over fresh host tensor result, as the compiled path makes them (its "
      "memory not held yet).");
  m.def("storage_backing", &storage_backing, "An npu storage's backing storage, or None.");
  m.def("set_storage_backing", &set_storage_backing, "Set an npu storage's backing storage.");
  m.def("storage_memory", &storage_memory, "An npu storage's device memory handle, or None.");
  m.def("storage_format", &storage_format, "An npu storage's private format, or None.");
  m.def("set_storage_format", &set_storage_format,
        "Tag an npu storage with a private format (None: the plain layout).");
}

