"""Graph mode: ``torch.compile`` onto the simulated NPU, as CANN's graph engine (GE) runs it.

A compiled FX graph is described device-side by :mod:`msprof_py.graph.ir` (torch-free): its
nodes, the tensors they produce and the kernels eager mode would launch for each. GE-style
passes (:mod:`msprof_py.graph.passes`) turn it into the kernels graph mode launches (fused
nodes, one kernel each), :mod:`msprof_py.graph.memory_plan` assigns their intermediates to one
workspace by lifetime, :mod:`msprof_py.graph.stream_plan` spreads independent branches over
streams, and the backend (``torch.compile(model, backend="npu")``) executes the plan: values
are computed on the host as in eager mode, the device sees one graph launch per call.
"""
