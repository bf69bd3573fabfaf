#pragma once
// torch.profiler sees tiny's work: a Kineto child profiler (the plugin interface torch's own PrivateUse1
// profiler registry forwards to) that, while a trace records, collects the realize engine's spans
// (runtime/realize.h: RealizeTracer) and hands them to Kineto as activities: every kernel as a device
// kernel of tiny:N, each sync, scheduling and compile as a host runtime event, all linked to the ATen op
// that caused them. It registers itself when the extension loads.

namespace tiny {

// True while a trace records tiny's activity (the realize engine then times its work).
bool profiler_tracing();

} // namespace tiny
