// The npu's device guard and PrivateUse1 hooks in C++.
//
// torch asks a device guard for the current device and stream many times per op: building an
// autograd node's input metadata, every DeviceGuard and stream guard, the autograd worker
// thread's bookkeeping. torch's Python-backend guard (torch::acc::PythonDeviceGuard) answers
// each question by taking the GIL and calling the Python method ``type_``, from functions
// declared noexcept (getStream, exchangeStream). Two ways that kills the process with
// "terminate called without an active exception":
//
// - a KeyboardInterrupt (or any Python error) pending when the guard looks up ``type_``: the
//   lookup throws pybind11's error_already_set out of a noexcept function;
// - an autograd worker thread asking while the interpreter finalizes: taking the GIL then ends
//   the thread (pthread_exit), whose unwinding may not cross a noexcept frame.
//
// These answer the same questions the same way (one device, npu:0; its default stream;
// events and streams always complete) without Python, so neither can happen. Registered
// before the Python ones; registration is first wins, so the Python classes in
// registration.py run only where this module is not built.

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

c10::Device npu0() { return c10::Device(kNpu, 0); }

c10::Stream default_stream() { return c10::Stream(c10::Stream::DEFAULT, npu0()); }

// What torch::acc::PythonDeviceGuard does, with type() answered here.
struct NpuDeviceGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNpu; }
  c10::Device exchangeDevice(c10::Device) const override { return npu0(); }
  c10::Device getDevice() const override { return npu0(); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override { return default_stream(); }
  c10::Stream getNewStream(c10::Device, int) const override { return default_stream(); }
  c10::Stream exchangeStream(c10::Stream) const noexcept override { return default_stream(); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};

//: what resizes an npu storage's bytes (hot_path.cpp's, set with set_storage_resize)
void (*resize_storage_bytes)(const c10::Storage&, size_t) = nullptr;

// What registration.py's _Hooks answers, and an npu storage's resize_() (torch asks the hooks
// for it; torch_npu resizes its device memory there); every other question gets the base
// class's answer, as it does through torch::acc::PythonHooks.
struct NpuHooks final : at::PrivateUse1HooksInterface {
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    TORCH_CHECK(resize_storage_bytes != nullptr, "resize_ of an npu storage: not installed");
    resize_storage_bytes(storage, newsize);
  }
};

}  // namespace

// Let ``resize`` resize an npu storage's bytes when torch asks the hooks to.
void set_storage_resize(void (*resize)(const c10::Storage&, size_t)) {
  resize_storage_bytes = resize;
}

// Register the guard and the hooks, each unless one is already registered; whether the guard
// is ours. Both live as long as the process (never destroyed: a thread torch leaves running at
// exit may still ask).
bool register_npu_device() {
  if (!at::isPrivateUse1HooksRegistered()) {
    at::RegisterPrivateUse1HooksInterface(new NpuHooks());
  }
  if (c10::impl::hasDeviceGuardImpl(kNpu)) return false;
  c10::impl::registerDeviceGuard(kNpu, new NpuDeviceGuard());
  return true;
}
