//===- tools/hsnn-jit/CacheCommand.cpp - hsnn-jit cache and info ----------===//
#include "Commands.h"

#include "hsnn/Cache.h"
#include "hsnn/Runtime.h"

#include <algorithm>
#include <fmt/format.h>
#include <thread>

namespace hsnn::cli {

namespace {
constexpr const char *kCacheHelp = R"(usage: hsnn-jit cache list|stats|clear [all|cpu|gpu] [--json]

  list    the entries, most recently used first, with what each holds
  stats   entry count and total size per category
  clear   remove the entries of a category (default: all)
The directory is HSNN_CACHE_DIR, else $XDG_CACHE_HOME/hsnn, else ~/.cache/hsnn.
)";
constexpr const char *kInfoHelp = R"(usage: hsnn-jit info [--json]

Prints what the runtime detected: CPU, capability, threads, JIT availability,
GPUs, the default method, and the cache directory and size.
)";

} // namespace

int runCache(std::span<const std::string_view> args) {
  std::string_view action, category = "all";
  bool categoryGiven = false;
  bool json = wantsJson(args);
  for (std::string_view a : args) {
    if (a == "-h" || a == "--help") {
      fmt::print("{}", kCacheHelp);
      return Ok;
    }
    if (a == "--json")
      continue;
    else if (action.empty())
      action = a;
    else if (action == "clear" && categoryGiven && (a == "all" || a == "cpu" || a == "gpu"))
      // "clear cpu gpu" would clear only the last one named
      return usageError("cache", fmt::format("clear takes one category, got '{}' and '{}' (use 'all' for both)",
                                             category, a),
                        json);
    else if (action == "clear" && (a == "all" || a == "cpu" || a == "gpu"))
      category = a, categoryGiven = true;
    else
      return usageError("cache", fmt::format("unexpected argument '{}'", a), json);
  }
  if (action != "list" && action != "stats" && action != "clear")
    return usageError("cache", action.empty() ? "expected list, stats or clear" : fmt::format("unknown action '{}'", action),
                      json);

  if (action == "clear") {
    // The same report and exit code whether or not there was anything to remove.
    CacheCategory c = category == "cpu" ? CacheCategory::Cpu : category == "gpu" ? CacheCategory::Gpu : CacheCategory::All;
    auto count = [&]() -> size_t {
      auto all = listKernelCache();
      if (!all)
        return 0;
      return size_t(std::count_if(all->begin(), all->end(),
                                  [&](const CacheEntryInfo &e) { return category == "all" || e.category == category; }));
    };
    size_t before = count();
    if (Error e = clearKernelCache(c))
      return reportError("cache", e.message(), BadInput, json);
    size_t removed = before - std::min(before, count());
    if (json)
      fmt::print("{{\"removed\": {}, \"category\": \"{}\", \"dir\": {}}}\n", removed, category, jsonQuote(kernelCacheDir()));
    else
      fmt::print("removed {} {} entr{} from {}\n", removed, category == "all" ? "cache" : category, removed == 1 ? "y" : "ies",
                 kernelCacheDir());
    return Ok;
  }
  auto entries = listKernelCache();
  if (!entries)
    return reportError("cache", entries.error().message(), BadInput, json);
  if (action == "list") {
    if (json) {
      fmt::print("[");
      for (size_t i = 0; i < entries->size(); ++i) {
        const CacheEntryInfo &e = (*entries)[i];
        fmt::print("{}{{\"path\": {}, \"category\": \"{}\", \"bytes\": {}, \"last_used\": {}, \"holds\": {}}}",
                   i ? ", " : "", jsonQuote(e.path), e.category, e.bytes, e.lastUsed, jsonQuote(e.description));
      }
      fmt::print("]\n");
    } else {
      for (const CacheEntryInfo &e : *entries)
        fmt::print("{:<4} {:>9} {}\n     {}\n", e.category, e.bytes, e.path,
                   e.description.empty() ? "(unreadable header)" : e.description);
    }
    return Ok;
  }
  uint64_t n[2] = {0, 0}, bytes[2] = {0, 0};
  for (const CacheEntryInfo &e : *entries) {
    int k = e.category == "gpu";
    ++n[k];
    bytes[k] += e.bytes;
  }
  if (json)
    fmt::print("{{\"dir\": {}, \"cpu\": {{\"entries\": {}, \"bytes\": {}}}, \"gpu\": {{\"entries\": {}, \"bytes\": {}}}}}\n",
               jsonQuote(kernelCacheDir()), n[0], bytes[0], n[1], bytes[1]);
  else
    fmt::print("dir: {}\ncpu: {} entries, {} bytes\ngpu: {} entries, {} bytes\n", kernelCacheDir(), n[0], bytes[0], n[1],
               bytes[1]);
  return Ok;
}

int runInfo(std::span<const std::string_view> args) {
  bool json = wantsJson(args);
  for (std::string_view a : args) {
    if (a == "-h" || a == "--help") {
      fmt::print("{}", kInfoHelp);
      return Ok;
    }
    if (a != "--json")
      return usageError("info", fmt::format("unexpected argument '{}'", a), json);
  }
  const RuntimeInfo &i = runtimeInfo();
  RuntimeFlags f = runtimeFlags();
  unsigned threads = f.threads ? f.threads : std::thread::hardware_concurrency();
  uint64_t cacheBytes = 0, cacheEntries = 0;
  if (auto entries = listKernelCache())
    for (const CacheEntryInfo &e : *entries) {
      cacheBytes += e.bytes;
      ++cacheEntries;
    }
  const RowKernelShape rows = i.cpuJitEnabled ? rowKernelShape() : RowKernelShape{"", "no cpu_jit here", ""};
  if (json) {
    std::string gpus;
    for (size_t k = 0; k < i.gpus.size(); ++k)
      gpus += fmt::format("{}{{\"id\": {}, \"name\": {}, \"arch\": \"{}\", \"code_arch\": \"{}\", \"memory\": {}}}",
                          k ? ", " : "", k, jsonQuote(i.gpus[k].name), i.gpus[k].arch, i.gpus[k].codeArch,
                          i.gpus[k].totalMemory);
    fmt::print("{{\"cpu\": {}, \"cpu_capability\": \"{}\", \"threads\": {}, \"cpu_jit_enabled\": {}, "
               "\"cpu_jit_unavailable_reason\": {}, \"gpu_enabled\": {}, \"num_gpus\": {}, \"gpus\": [{}], "
               "\"cuda_driver_version\": {}, \"gpu_unavailable_reason\": {}, "
               "\"default_method\": \"{}\", \"use_kernel_cache\": {}, \"strict\": {}, \"cache_dir\": {}, "
               "\"cache_entries\": {}, \"cache_bytes\": {}, \"cache_linker\": {}, \"code_generator\": {}, "
               "\"row_shape\": {}, \"row_shape_source\": {}}}\n",
               jsonQuote(i.cpuName), i.cpuCapability, threads, i.cpuJitEnabled, jsonQuote(i.cpuJitUnavailableReason),
               i.gpuEnabled, i.numGpus, gpus, i.cudaDriverVersion, jsonQuote(i.gpuUnavailableReason),
               to_string(i.defaultMethod), f.useKernelCache, f.strict, jsonQuote(kernelCacheDir()), cacheEntries,
               cacheBytes, jsonQuote(i.cacheLinker), jsonQuote(i.codeGenerator), jsonQuote(rows.shape),
               jsonQuote(rows.source));
    return Ok;
  }
  fmt::print("cpu:            {} ({})\n", i.cpuName.empty() ? "unknown" : i.cpuName, i.cpuCapability);
  fmt::print("threads:        {}\n", threads);
  fmt::print("cpu_jit:        {}\n", i.cpuJitEnabled ? "available" : "unavailable: " + i.cpuJitUnavailableReason);
  if (i.cpuJitEnabled) {
    std::string timings = rows.timings;
    for (size_t at = 0; (at = timings.find('\n', at)) != std::string::npos;)
      timings.replace(at, 1, at + 1 == timings.size() ? "" : " ms, ");
    fmt::print("row kernels:    {}{}\n", rows.shape.empty() ? "" : rows.shape + ", ", rows.source,
               timings.empty() ? "" : " (probe forward+backward: " + timings + " ms)");
  }
  if (!i.codeGenerator.empty())
    fmt::print("code generator: {}\n", i.codeGenerator);
  fmt::print("gpus:           {}\n", i.numGpus ? std::to_string(i.numGpus) : "none: " + i.gpuUnavailableReason);
  if (i.numGpus)
    fmt::print("cuda driver:    {}.{}\n", i.cudaDriverVersion / 1000, i.cudaDriverVersion % 1000 / 10);
  for (size_t k = 0; k < i.gpus.size(); ++k) {
    const GpuInfo &g = i.gpus[k];
    fmt::print("  cuda:{} {} ({}, {} MiB){}\n", k, g.name, g.arch, g.totalMemory >> 20,
               g.codeArch.empty() ? std::string() : ", code for " + g.codeArch);
  }
  if (i.numGpus && !i.gpuEnabled)
    fmt::print("cuda method:    unavailable: {}\n", i.gpuUnavailableReason);
  fmt::print("default method: {}\n", to_string(i.defaultMethod));
  fmt::print("strict:         {}\n", f.strict);
  fmt::print("kernel cache:   {} ({}; {} entries, {} bytes)\n", kernelCacheDir(), f.useKernelCache ? "on" : "off",
             cacheEntries, cacheBytes);
  fmt::print("cache linker:   {}\n", i.cacheLinker.empty() ? "none (cache hits load objects through the JIT)" : i.cacheLinker);
  return Ok;
}

} // namespace hsnn::cli
