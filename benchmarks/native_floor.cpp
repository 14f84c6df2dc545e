// The floor of a compiled PrivateUse1 dispatch path: a boxed C++ kernel that does no work,
// registered as the fallback and for add.Tensor (it returns its first tensor argument, or a
// fresh 16-element CPU-backed tensor for ops without one). Built by
// benchmarks/bench_adapter.py --native-floor with torch.utils.cpp_extension; never part of
// the package.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <memory>

namespace {

void do_nothing_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t count = schema.arguments().size();
  at::Tensor result;
  for (size_t i = 0; i < count && !result.defined(); ++i) {
    const auto& value = (*stack)[stack->size() - count + i];
    if (value.isTensor()) result = value.toTensor();
  }
  if (!result.defined()) {
    result = at::detail::empty_generic({16}, c10::GetAllocator(c10::DeviceType::CPU),
                                       c10::DispatchKeySet(c10::DispatchKey::CPU), at::kFloat,
                                       std::nullopt);
  }
  torch::jit::drop(*stack, count);
  for (size_t r = 0; r < schema.returns().size(); ++r) torch::jit::push(*stack, result);
}

std::unique_ptr<torch::Library> library;
std::unique_ptr<torch::Library> aten;

}  // namespace

void install_floor() {
  library = std::make_unique<torch::Library>(torch::Library::IMPL, "_",
                                             c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  library->fallback(torch::CppFunction::makeFromBoxedFunction<&do_nothing_fallback>());
  // add.Tensor directly, as the adapter registers it (else its structured composite would
  // dispatch empty_strided and add.out: three calls)
  aten = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                          c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  aten->impl("add.Tensor", torch::CppFunction::makeFromBoxedFunction<&do_nothing_fallback>());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install_floor", &install_floor, "Register the do-nothing fallback for PrivateUse1.");
}
