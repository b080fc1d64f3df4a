// pytest-sme2 native runner: loads a .pte, runs warmup + timed iterations in
// one process, writes ETDumps and prints per-iteration latencies.
//
// Flags follow ExecuTorch's executor_runner where they overlap
// (--model_path, --etdump_path, --num_executions, --cpu_threads), so a user's
// own executor_runner build can stand in for this one. Output contract: one
// line "PYTEST_SME2_RESULT {json}" on stdout; errors go to stderr with a
// non-zero exit status (2 usage, 3 load, 4 inputs, 5 run, 6 output).
// --version prints "pytest-sme2 runner executorch=<version it was built against>".
// --method=NAME runs that method of the program (default forward); --warmup_method=NAME the warmup runs' method
// (default: --method). --inputs_per_call=N splits the inputs file into calls of N tensors each, timed run i
// taking call i modulo their number (0, the default: the whole file is one call), so a sequence of calls with
// state carried between them (a language model's decode steps at successive positions over its KV cache) runs
// in one process; --warmup_inputs_path=FILE gives the warmup runs their own calls (a prefill that fills the
// cache before timed decode steps), split the same way (default: the inputs file). With two methods the
// program's memory arenas are shared between them, as a program exported with share_mutable_buffers needs.
// --kernel_library=PATH (repeatable) loads a shared library before the program, so the kernels it registers
// (ExecuTorch's LLM custom ops: pytest_sme2/run/native/kernel_kit.py) are in the registry when methods load.
// --reference_path=PTE runs one inference of that program right before each
// timed (and warmup) inference and reports its times as "reference_ms": the
// baseline gate divides by it so drift of the whole machine cancels
// (pytest_sme2/export/reference_program.py says why).
// --startup_repeats=N (with a reference program) loads the model's method N times, each right after a timed
// load of the reference program's ("reference_load_ms", one per load): the first before the runs, the others
// after them, their Program::load_method and Method::init in a "Default" block after the runs' blocks.
// "clock_offset_ns" is the steady clock (CLOCK_MONOTONIC on Linux and Android)
// minus the ETDump's clock, read back to back: ETDump ticks count from the
// runtime's init, and a sampling profiler's samples (perf -k CLOCK_MONOTONIC,
// simpleperf) are placed inside ETDump operator events with it
// (pytest_sme2/evidence/kernel_sampling.py).

#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

// The wheel exports these symbols but does not ship threadpool.h.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
// Exported by libexecutorch_threadpool: while enabled on a thread, get_pthreadpool() answers no pool and
// ThreadPool::run runs inline there, so XNNPACK and the kernels run on the calling thread alone.
class NoThreadPoolGuard {
 public:
  static void set_enabled(bool enabled);
};
}  // namespace executorch::extension::threadpool

using executorch::aten::ScalarType;
using executorch::extension::Module;
using executorch::extension::TensorPtr;
using executorch::runtime::EValue;

namespace {

struct Options {
  std::string model_path;
  std::string etdump_path;
  std::string warmup_etdump_path;
  std::string inputs_path;
  std::string warmup_inputs_path;  // the warmup runs' calls (default: inputs_path)
  std::string method = "forward";
  std::string warmup_method;  // default: method
  long inputs_per_call = 0;  // 0: the whole inputs file is one call
  std::string outputs_path;
  std::string reference_path;  // program run before each inference, timed apart (relative latency)
  std::vector<std::string> kernel_libraries;  // loaded before the program (--kernel_library, repeatable)
  std::string maps_path;  // copy of /proc/self/maps at exit: where each library was loaded (kernel traces)
  long num_executions = 1;
  long warmup = 0;
  long cpu_threads = 0;  // 0: leave the runtime's default
  long startup_repeats = 1;  // times the model's method is loaded (each after a timed reference program load)
};

[[noreturn]] void die(int code, const std::string& message) {
  std::cerr << "sme2_runner: " << message << std::endl;
  std::exit(code);
}

bool take(const std::string& arg, const char* name, std::string* out) {
  std::string prefix = std::string("--") + name + "=";
  if (arg.rfind(prefix, 0) == 0) {
    *out = arg.substr(prefix.size());
    return true;
  }
  return false;
}

long to_long(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  long result = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0') die(2, "--" + flag + "=" + value + " is not an integer");
  return result;
}

#ifndef PYTEST_SME2_EXECUTORCH_VERSION
#define PYTEST_SME2_EXECUTORCH_VERSION "unknown"
#endif

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], v;
    if (arg == "--version") {  // lets a target check the runtime this binary links before using it
      std::cout << "pytest-sme2 runner executorch=" << PYTEST_SME2_EXECUTORCH_VERSION << std::endl;
      std::exit(0);
    }
    if (take(arg, "model_path", &o.model_path)) continue;
    if (take(arg, "etdump_path", &o.etdump_path)) continue;
    if (take(arg, "warmup_etdump_path", &o.warmup_etdump_path)) continue;
    if (take(arg, "inputs_path", &o.inputs_path)) continue;
    if (take(arg, "warmup_inputs_path", &o.warmup_inputs_path)) continue;
    if (take(arg, "method", &o.method)) continue;
    if (take(arg, "warmup_method", &o.warmup_method)) continue;
    if (take(arg, "inputs_per_call", &v)) { o.inputs_per_call = to_long("inputs_per_call", v); continue; }
    if (take(arg, "outputs_path", &o.outputs_path)) continue;
    if (take(arg, "maps_path", &o.maps_path)) continue;
    if (take(arg, "reference_path", &o.reference_path)) continue;
    if (take(arg, "kernel_library", &v)) { o.kernel_libraries.push_back(v); continue; }
    if (take(arg, "num_executions", &v)) { o.num_executions = to_long("num_executions", v); continue; }
    if (take(arg, "warmup", &v)) { o.warmup = to_long("warmup", v); continue; }
    if (take(arg, "cpu_threads", &v)) { o.cpu_threads = to_long("cpu_threads", v); continue; }
    if (take(arg, "startup_repeats", &v)) { o.startup_repeats = to_long("startup_repeats", v); continue; }
    die(2, "unknown argument '" + arg + "' (flags take the form --name=value)");
  }
  if (o.model_path.empty()) die(2, "--model_path=PATH is required");
  if (o.num_executions < 1) die(2, "--num_executions must be >= 1");
  if (o.warmup < 0) die(2, "--warmup must be >= 0");
  if (o.cpu_threads < 0) die(2, "--cpu_threads must be >= 0");
  if (o.startup_repeats < 1) die(2, "--startup_repeats must be >= 1");
  if (o.inputs_per_call < 0) die(2, "--inputs_per_call must be >= 0");
  if (o.method.empty()) die(2, "--method must name a method of the program");
  if (o.warmup_method.empty()) o.warmup_method = o.method;
  return o;
}

// Tensor file: repeated [int32 dtype][int32 ndim][int64 sizes[ndim]][int64 nbytes][bytes].
std::vector<TensorPtr> read_tensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die(4, "cannot open inputs file " + path);
  std::vector<TensorPtr> tensors;
  while (in.peek() != EOF) {
    int32_t dtype = 0, ndim = 0;
    in.read(reinterpret_cast<char*>(&dtype), 4);
    in.read(reinterpret_cast<char*>(&ndim), 4);
    if (!in || ndim < 0 || ndim > 16) die(4, "inputs file " + path + " is corrupt (header)");
    std::vector<executorch::aten::SizesType> sizes(ndim);
    for (int d = 0; d < ndim; ++d) {
      int64_t size = 0;
      in.read(reinterpret_cast<char*>(&size), 8);
      sizes[d] = static_cast<executorch::aten::SizesType>(size);
    }
    int64_t nbytes = 0;
    in.read(reinterpret_cast<char*>(&nbytes), 8);
    if (!in || nbytes < 0) die(4, "inputs file " + path + " is corrupt (size)");
    std::vector<uint8_t> data(static_cast<size_t>(nbytes));
    in.read(reinterpret_cast<char*>(data.data()), nbytes);
    if (!in) die(4, "inputs file " + path + " is truncated");
    tensors.push_back(executorch::extension::make_tensor_ptr(
        std::move(sizes), std::move(data), {}, {}, static_cast<ScalarType>(dtype)));
  }
  return tensors;
}

void write_tensors(const std::string& path, const std::vector<EValue>& outputs) {
  std::ofstream out(path, std::ios::binary);
  if (!out) die(6, "cannot write outputs file " + path);
  for (const auto& value : outputs) {
    if (!value.isTensor()) continue;
    const auto& t = value.toTensor();
    int32_t dtype = static_cast<int32_t>(t.scalar_type()), ndim = static_cast<int32_t>(t.dim());
    out.write(reinterpret_cast<const char*>(&dtype), 4);
    out.write(reinterpret_cast<const char*>(&ndim), 4);
    for (int d = 0; d < ndim; ++d) {
      int64_t size = t.size(d);
      out.write(reinterpret_cast<const char*>(&size), 8);
    }
    int64_t nbytes = static_cast<int64_t>(t.nbytes());
    out.write(reinterpret_cast<const char*>(&nbytes), 8);
    out.write(static_cast<const char*>(t.const_data_ptr()), nbytes);
  }
}

// Peak resident memory of this process since the last reset, in KiB: VmHWM, reset by writing 5 to
// /proc/self/clear_refs (Linux and Android), so each timed run gets its own peak; where that does not
// exist (macOS) the process-lifetime peak from getrusage.
void reset_peak_rss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return;
  std::fputs("5", f);
  std::fclose(f);
}

long peak_rss_kb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return -1;
#ifdef __APPLE__
  return usage.ru_maxrss / 1024;  // bytes on macOS
#else
  return usage.ru_maxrss;
#endif
}

void write_etdump(executorch::etdump::ETDumpGen* gen, const std::string& path) {
  executorch::etdump::ETDumpResult result = gen->get_etdump_data();
  if (result.buf == nullptr || result.size == 0) die(6, "the runtime produced an empty ETDump for " + path);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) die(6, "cannot write ETDump " + path);
  size_t written = std::fwrite(result.buf, 1, result.size, f);
  std::fclose(f);
  std::free(result.buf);
  if (written != result.size) die(6, "short write of ETDump " + path);
  gen->reset();  // start a fresh trace: the next file holds only the runs after this one
}

// All-ones inputs from the method's metadata, for programs run without an inputs file.
std::vector<TensorPtr> ones_inputs(const executorch::runtime::MethodMeta& meta, const std::string& program) {
  std::vector<TensorPtr> tensors;
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    auto info = meta.input_tensor_meta(i);
    if (!info.ok()) die(4, "input " + std::to_string(i) + " of " + program + " is not a tensor; pass --inputs_path");
    std::vector<executorch::aten::SizesType> sizes(info->sizes().begin(), info->sizes().end());
    tensors.push_back(executorch::extension::ones(std::move(sizes), info->scalar_type()));
  }
  return tensors;
}

void load_method(Module& module, const std::string& method, const std::string& path, const char* what) {
  auto error = module.load_method(method);
  if (error != executorch::runtime::Error::Ok) {
    std::ostringstream m;
    m << "cannot load method '" << method << "' of " << what << path << " (error 0x" << std::hex
      << static_cast<int>(error) << ")";
    die(3, m.str());
  }
}

std::vector<EValue> run_method(Module& module, const std::string& method, const std::vector<EValue>& inputs,
                               const char* what) {
  auto result = module.execute(method, inputs);
  if (!result.ok()) {
    std::ostringstream m;
    m << what << method << " failed (error 0x" << std::hex << static_cast<int>(result.error()) << ")";
    die(5, m.str());
  }
  return std::move(*result);
}

// The calls of an inputs file: its tensors in groups of per_call (0: one group of all), each checked against
// the method's number of inputs.
std::vector<std::vector<EValue>> calls_of(std::vector<TensorPtr>& tensors, long per_call, size_t num_inputs,
                                          const std::string& path, const std::string& method) {
  size_t group = per_call > 0 ? static_cast<size_t>(per_call) : tensors.size();
  if (group != num_inputs || (group > 0 && tensors.size() % group != 0)) {
    die(4, "method '" + method + "' takes " + std::to_string(num_inputs) + " inputs per call; " + path + " has " +
               std::to_string(tensors.size()) + " tensors in calls of " + std::to_string(group));
  }
  std::vector<std::vector<EValue>> calls;
  if (group == 0) {
    calls.emplace_back();
    return calls;
  }
  for (size_t i = 0; i < tensors.size(); i += group) calls.emplace_back(tensors.begin() + i, tensors.begin() + i + group);
  return calls;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  executorch::runtime::runtime_init();
  for (const std::string& library : o.kernel_libraries) {  // before any program: its kernels register on load
    if (dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* why = dlerror();
      die(3, "cannot load kernel library " + library + ": " + (why ? why : "unknown error"));
    }
  }
  // One thread: no thread pool at all. Creating the default pool starts a worker per core, which
  // another reset then stops; those threads' start-up and shutdown race the main thread for the
  // allocator and the dynamic linker's TLS state, and the instruction counts of the emulated
  // target's traced run (instruction_trace.py) then differ by tens of instructions run to run.
  executorch::extension::threadpool::ThreadPool* pool = nullptr;
  if (o.cpu_threads == 1) {
    executorch::extension::threadpool::NoThreadPoolGuard::set_enabled(true);
  } else {
    pool = executorch::extension::threadpool::get_threadpool();
    if (o.cpu_threads > 0 && pool != nullptr) pool->_unsafe_reset_threadpool(static_cast<uint32_t>(o.cpu_threads));
  }

  const bool tracing = !o.etdump_path.empty();
  std::unique_ptr<executorch::etdump::ETDumpGen> tracer;
  executorch::etdump::ETDumpGen* gen = nullptr;
  if (tracing) {
    tracer = std::make_unique<executorch::etdump::ETDumpGen>();
    gen = tracer.get();
  }
  // Two methods of one process (a language model's prefill and decode methods) read one KV cache only when
  // they share the program's memory arenas: ExecuTorch's LLM export plans the cache there
  // (share_mutable_buffers); with separate arenas the decode method would read a cache nothing filled.
  const bool two_methods = o.warmup_method != o.method;
  Module module(o.model_path, Module::LoadMode::Mmap, std::move(tracer), nullptr, nullptr, two_methods);
  // The reference program has no tracer, so the model's ETDump holds the model's runs only.
  std::unique_ptr<Module> reference;
  if (!o.reference_path.empty()) reference = std::make_unique<Module>(o.reference_path, Module::LoadMode::Mmap);

  // Start-up: the reference program's method loaded (timed here; its load packs its weights as the model's init
  // does) right before the model's (timed by the ETDump's Program::load_method and Method::init events). Once
  // here, and --startup_repeats - 1 times more after the timed runs (below). One load per process is one sample
  // with no median to shed a preemption, and a busy machine slows weight packing more than an inference: the gate
  // divides each model load and init by the reference load just before it (pytest_sme2/gate/checks/startup.py,
  // startup_verdicts).
  std::vector<double> reference_load_ms;
  auto load_both = [&]() {
    if (reference) {
      reference->unload_forward();
      auto start = std::chrono::steady_clock::now();
      load_method(*reference, "forward", o.reference_path, "reference program ");
      auto end = std::chrono::steady_clock::now();
      reference_load_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    }
    module.unload_method(o.method);
    load_method(module, o.method, o.model_path, "");
  };
  load_both();
  auto meta = module.method_meta(o.method);
  if (!meta.ok()) die(3, "cannot read the metadata of method '" + o.method + "' of " + o.model_path);
  if (two_methods && o.warmup > 0) load_method(module, o.warmup_method, o.model_path, "");
  auto warmup_meta = module.method_meta(o.warmup_method);
  if (!warmup_meta.ok()) die(3, "cannot read the metadata of method '" + o.warmup_method + "' of " + o.model_path);

  std::vector<TensorPtr> tensors =
      o.inputs_path.empty() ? ones_inputs(*meta, o.model_path) : read_tensors(o.inputs_path);
  std::vector<std::vector<EValue>> calls =
      calls_of(tensors, o.inputs_path.empty() ? 0 : o.inputs_per_call, meta->num_inputs(),
               o.inputs_path.empty() ? "all-ones inputs" : o.inputs_path, o.method);
  std::vector<TensorPtr> warmup_tensors;
  std::vector<std::vector<EValue>> warmup_calls = calls;
  if (!o.warmup_inputs_path.empty()) {
    warmup_tensors = read_tensors(o.warmup_inputs_path);
    warmup_calls = calls_of(warmup_tensors, o.inputs_per_call, warmup_meta->num_inputs(), o.warmup_inputs_path,
                            o.warmup_method);
  } else if (two_methods) {
    warmup_tensors = ones_inputs(*warmup_meta, o.model_path);
    warmup_calls = calls_of(warmup_tensors, 0, warmup_meta->num_inputs(), "all-ones inputs", o.warmup_method);
  }

  std::vector<TensorPtr> reference_tensors;
  std::vector<EValue> reference_inputs;
  if (reference) {
    auto reference_meta = reference->method_meta("forward");
    if (!reference_meta.ok()) die(3, "cannot read method metadata of reference program " + o.reference_path);
    reference_tensors = ones_inputs(*reference_meta, o.reference_path);
    reference_inputs.assign(reference_tensors.begin(), reference_tensors.end());
  }
  std::vector<double> reference_ms;

  std::vector<EValue> outputs;
  auto run_once = [&](long i) { outputs = run_method(module, o.method, calls[static_cast<size_t>(i) % calls.size()], ""); };
  auto run_warmup = [&](long i) {
    outputs = run_method(module, o.warmup_method, warmup_calls[static_cast<size_t>(i) % warmup_calls.size()], "");
  };
  auto run_reference = [&](bool timed) {
    if (!reference) return;
    auto start = std::chrono::steady_clock::now();
    run_method(*reference, "forward", reference_inputs, "reference program ");
    auto end = std::chrono::steady_clock::now();
    if (timed) reference_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  };
  for (long i = 0; i < o.warmup; ++i) {
    run_reference(false);
    run_warmup(i);
  }
  if (tracing && o.warmup > 0) {
    write_etdump(gen, o.warmup_etdump_path.empty() ? o.etdump_path + ".warmup" : o.warmup_etdump_path);
  }
  std::vector<double> latency_ms;
  std::vector<long> rss_kb;
  latency_ms.reserve(static_cast<size_t>(o.num_executions));
  for (long i = 0; i < o.num_executions; ++i) {
    reset_peak_rss();
    run_reference(true);
    auto start = std::chrono::steady_clock::now();
    run_once(i);
    auto end = std::chrono::steady_clock::now();
    latency_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    rss_kb.push_back(peak_rss_kb());
  }
  if (!o.outputs_path.empty()) write_tensors(o.outputs_path, outputs);
  outputs.clear();  // they point into the method's buffers, which the loads below free
  // The repeated loads come after the timed runs, so those runs and their peak memory are a once-loaded
  // process's: freed methods leave the heap larger (peak RSS of mobilenet-sized programs +8 to +18 MiB before
  // the runs). Their events go to a block of their own, after the runs' "Execute" blocks.
  if (o.startup_repeats > 1) {
    if (tracing) gen->create_event_block("Default");
    for (long repeat = 1; repeat < o.startup_repeats; ++repeat) load_both();
  }
  if (tracing) write_etdump(gen, o.etdump_path);
  if (!o.maps_path.empty()) {
    std::ifstream maps("/proc/self/maps");
    std::ofstream copy(o.maps_path);
    copy << maps.rdbuf();
    if (!copy) die(6, "cannot write " + o.maps_path);
  }

  // Both clocks, the ETDump's between two steady-clock reads, so the offset is exact to a few ns. A read
  // interrupted between the two (a busy machine) would be off by half the interruption, so the narrowest
  // of several reads is kept.
  et_tick_ratio_t ns_per_tick = et_pal_ticks_to_ns_multiplier();
  long long clock_offset_ns = 0;
  long long narrowest_ns = -1;
  for (int attempt = 0; attempt < 64; ++attempt) {
    auto before = std::chrono::steady_clock::now().time_since_epoch();
    et_timestamp_t ticks = et_pal_current_ticks();
    auto after = std::chrono::steady_clock::now().time_since_epoch();
    long long window_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(after - before).count();
    if (narrowest_ns >= 0 && window_ns >= narrowest_ns) continue;
    narrowest_ns = window_ns;
    long long steady_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(before + (after - before) / 2).count();
    clock_offset_ns = steady_ns - static_cast<long long>(ticks * ns_per_tick.numerator / ns_per_tick.denominator);
  }

  std::ostringstream json;
  json.precision(6);
  json << std::fixed << "{\"latency_ms\": [";
  for (size_t i = 0; i < latency_ms.size(); ++i) json << (i ? ", " : "") << latency_ms[i];
  json << "]";
  if (reference) {
    json << ", \"reference_ms\": [";
    for (size_t i = 0; i < reference_ms.size(); ++i) json << (i ? ", " : "") << reference_ms[i];
    json << "], \"reference_load_ms\": [";
    for (size_t i = 0; i < reference_load_ms.size(); ++i) json << (i ? ", " : "") << reference_load_ms[i];
    json << "]";
  }
  json << ", \"peak_rss_kb\": [";
  for (size_t i = 0; i < rss_kb.size(); ++i) json << (i ? ", " : "") << rss_kb[i];
  json << "], \"planned_buffers\": [";
  for (size_t i = 0; i < meta->num_memory_planned_buffers(); ++i) {
    auto size = meta->memory_planned_buffer_size(i);
    json << (i ? ", " : "") << (size.ok() ? *size : -1);
  }
  json << "]";
  json << ", \"clock_offset_ns\": " << clock_offset_ns;
  json << ", \"threads\": " << (o.cpu_threads == 1 ? 1 : pool != nullptr ? pool->get_thread_count() : 0) << "}";
  std::cout << "PYTEST_SME2_RESULT " << json.str() << std::endl;
  return 0;
}
