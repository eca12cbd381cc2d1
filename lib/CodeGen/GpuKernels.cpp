//===- lib/CodeGen/GpuKernels.cpp - Layer and loss kernels for NVPTX ------===//
//
// The same element lowering as the CPU loops, wrapped for the GPU:
// - a layer is one launch whatever its node count, its node's program and
//   constants picked through a switch that is uniform per warp: in
//   nodes-major the y grid dimension is the node (looked up once per block,
//   a loop per formula), and batch-major layers go through shared-memory
//   tiles in which a warp computes one node;
// - loss sums are reduced without atomics: each thread sums its grid-stride
//   share, the warp adds those with shuffles in a fixed tree, lane 0 writes
//   one partial, and a block per segment adds the partials in a fixed order
//   (its warps' totals through shared memory). The bits are the same on
//   every run (the launch shape depends only on the kernel and n).
//===----------------------------------------------------------------------===//
#include "GpuIR.h"

#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

#include <optional>

namespace hsnn::detail {
namespace {

using namespace llvm;

/// Grid strides each thread loads ahead of the element it computes.
constexpr unsigned kAhead = 4;
/// A batch-major layer's tile: rows x nodes (a warp's width), and the
/// threads of the block that goes through it (KernelSpec.h).
constexpr unsigned kTileRows = kBatchMajorTileRows, kTileNodes = kBatchMajorTileNodes, kTileBlock = kBatchMajorBlock;
static_assert(kTileNodes == kWarp && kTileRows % kWarp == 0 && kTileBlock % kWarp == 0 &&
              kTileRows % (kTileBlock / kWarp) == 0 && kTileNodes % (kTileBlock / kWarp) == 0);

/// The inputs of the next kAhead elements a thread will compute, loaded
/// ahead: each iteration issues the loads for kAhead strides later, so a
/// thread keeps kAhead loads per input in flight while it computes, and the
/// formula's code is still emitted once. (With one 4-byte load per thread,
/// a fully occupied H100 has ~1 MB in flight; its bandwidth times latency,
/// ~3.3 TB/s x ~600 ns, is ~2 MB.) Each warp's loads stay coalesced.
/// Indices past the end are clamped to the last element (a harmless extra
/// load) rather than branched around. The loads are ld.global.nc
/// intrinsics, not plain loads, because InstCombine folds a phi of plain
/// loads into a load of a phi of addresses, which would move every load
/// back to its use. (nc is safe even in place: an element is only ever
/// written by the thread that read it, after it read it.)
class LoadAhead {
public:
  /// In the block before the loop (where start < total holds): the first
  /// kAhead loads of each array, at base + index.
  LoadAhead(IRBuilder<> &b, Type *t, std::vector<Value *> arrays, Value *base, Value *start, Value *step, Value *total)
      : t_(t), arrays_(std::move(arrays)), base_(base), step_(step), last_(b.CreateSub(total, b.getInt64(1))) {
    preheader_ = b.GetInsertBlock();
    for (Value *array : arrays_) {
      std::vector<Value *> loads;
      for (unsigned k = 0; k < kAhead; ++k)
        loads.push_back(load(b, array, b.CreateAdd(start, b.CreateMul(step, b.getInt64(k)))));
      initial_.push_back(std::move(loads));
    }
  }

  /// At the top of the loop, after its other phis: the current element's
  /// inputs (one per array); issues the loads for element i + kAhead strides.
  std::vector<Value *> enter(IRBuilder<> &b, Value *i) {
    std::vector<Value *> current;
    for (size_t a = 0; a < arrays_.size(); ++a) {
      std::vector<PHINode *> phis;
      for (unsigned k = 0; k < kAhead; ++k) {
        PHINode *phi = b.CreatePHI(t_, 2, "ahead");
        phi->addIncoming(initial_[a][k], preheader_);
        phis.push_back(phi);
      }
      phis_.push_back(phis);
      current.push_back(phis[0]);
    }
    for (size_t a = 0; a < arrays_.size(); ++a)
      next_.push_back(load(b, arrays_[a], b.CreateAdd(i, b.CreateMul(step_, b.getInt64(kAhead)))));
    return current;
  }

  /// The back edge from `latch`: every value moves one stride closer.
  void close(BasicBlock *latch) {
    for (size_t a = 0; a < arrays_.size(); ++a)
      for (unsigned k = 0; k < kAhead; ++k)
        phis_[a][k]->addIncoming(k + 1 < kAhead ? static_cast<Value *>(phis_[a][k + 1]) : next_[a], latch);
  }

private:
  Value *load(IRBuilder<> &b, Value *array, Value *index) {
    Value *clamped = b.CreateSelect(b.CreateICmpULT(index, last_), index, last_);
    return loadGlobal(b, t_, array, b.CreateAdd(base_, clamped));
  }

  Type *t_;
  std::vector<Value *> arrays_;
  Value *base_, *step_, *last_;
  BasicBlock *preheader_ = nullptr;
  std::vector<std::vector<Value *>> initial_;
  std::vector<std::vector<PHINode *>> phis_;
  std::vector<Value *> next_;
};

class GpuKernelBuilder : public GpuIR {
public:
  GpuKernelBuilder(Module &m, const EmitOptions &o) : GpuIR(m, o) {}

  /// A nodes-major layer: the y grid dimension is the node, so its formula
  /// and constants are the block's: looked up once, before a loop per unit
  /// (the formula switch unswitched), in which the x threads stride over the
  /// node's batch elements. In the loop the unit's lookup and its constants'
  /// loads and conversions had cost each element a load, a compare and a
  /// branch, and one load (with a cvt for floats) per constant.
  llvm::Error layer(const GpuLayerKernel &k) {
    if (k.layout == Layout::BatchMajor)
      return batchMajorLayer(k);
    Type *t = elementType(k.dtype), *i64 = Type::getInt64Ty(ctx_);
    auto fn = layerKernel(k.symbol, 0);
    if (!fn)
      return fn.takeError();
    Function *f = *fn;
    Value *batch = f->getArg(7), *firstNode = f->getArg(9);

    BasicBlock *entry = BasicBlock::Create(ctx_, "entry", f), *dispatch = BasicBlock::Create(ctx_, "dispatch", f),
               *exit = BasicBlock::Create(ctx_, "exit", f);
    IRBuilder<> b(entry);
    if (opt_.fastMath)
      b.setFastMathFlags(FastMathFlags::getFast());
    auto [start, step] = gridStride(b);
    Value *node = b.CreateAdd(firstNode, sreg(b, Intrinsic::nvvm_read_ptx_sreg_ctaid_y));
    Value *base = b.CreateMul(node, batch);
    b.CreateCondBr(b.CreateICmpSLT(start, batch), dispatch, exit);

    b.SetInsertPoint(dispatch);
    auto [unit, params] = nodeUnit(b, f, node);
    SwitchInst *sw = b.CreateSwitch(unit, exit, unsigned(k.units.size()));
    for (size_t u = 0; u < k.units.size(); ++u) {
      BasicBlock *pre = BasicBlock::Create(ctx_, "unit" + std::to_string(u), f, exit),
                 *loop = BasicBlock::Create(ctx_, "loop", f, exit), *latch = BasicBlock::Create(ctx_, "latch", f, exit);
      sw->addCase(b.getInt32(uint32_t(u)), pre);
      b.SetInsertPoint(pre);
      std::vector<Value *> constants;
      lowering_.constants(b, *k.units[u], params, t, constants);
      std::vector<Value *> inputs = {f->getArg(0)};
      if (k.kind == KernelKind::Backward)
        inputs.push_back(f->getArg(1));
      LoadAhead ahead(b, t, inputs, base, start, step, batch);
      b.CreateBr(loop);

      b.SetInsertPoint(loop);
      PHINode *i = b.CreatePHI(i64, 2, "i");
      i->addIncoming(start, pre);
      std::vector<Value *> current = ahead.enter(b, i);
      ElementIO io{f, b.CreateAdd(base, i), t, 0};
      for (size_t a = 0; a < current.size(); ++a)
        io.preloaded[a] = current[a];
      if (auto r = lowering_.element(b, k.kind, *k.units[u], constants, io, nullptr); !r)
        return r.takeError();
      b.CreateBr(latch);

      b.SetInsertPoint(latch);
      Value *next = b.CreateAdd(i, step, "i.next", true, true);
      i->addIncoming(next, latch);
      ahead.close(latch);
      b.CreateCondBr(b.CreateICmpSLT(next, batch), loop, exit);
    }
    b.SetInsertPoint(exit);
    b.CreateRetVoid();
    return llvm::Error::success();
  }

  /// A batch-major layer ((batch, nodes), row-major) in tiles of
  /// kTileRows rows x kTileNodes nodes, so that every warp computes one node
  /// at a time. A block of kTileBlock threads loads a tile coalesced (a warp
  /// per row, a lane per node: each thread issues its kTileRows / warps loads
  /// before it stores any, so they are in flight together) into shared
  /// memory; each warp then takes columns (a lane per row: one node, one
  /// formula, no divergence) and writes its results back into the tile; the
  /// block stores the tile coalesced. Each element goes through the same
  /// lowering as in nodes-major, so the two layouts give the same bits. Rows
  /// are padded by one element so that a warp's column reads hit different
  /// banks. Past the layer's edge, loads are clamped to its last row and node
  /// (computed, never stored). Blocks walk the tiles grid-stride.
  llvm::Error batchMajorLayer(const GpuLayerKernel &k) {
    Type *t = elementType(k.dtype), *i64 = Type::getInt64Ty(ctx_);
    auto fn = layerKernel(k.symbol, kTileBlock);
    if (!fn)
      return fn.takeError();
    Function *f = *fn;
    Value *batch = f->getArg(7), *nodes = f->getArg(8);
    constexpr unsigned warps = kTileBlock / kWarp, rowsPerWarp = kTileRows / warps;
    // Tile 0 holds z (then out0), tile 1 err (backward) or out1 (fused).
    bool twoTiles = k.kind == KernelKind::Backward || k.kind == KernelKind::Fused;

    IRBuilder<> b(BasicBlock::Create(ctx_, "entry", f));
    if (opt_.fastMath)
      b.setFastMathFlags(FastMathFlags::getFast());
    Value *tiles[2] = {sharedTile(b, k.symbol + ".tile0", t), twoTiles ? sharedTile(b, k.symbol + ".tile1", t) : nullptr};
    Value *tid = sreg(b, Intrinsic::nvvm_read_ptx_sreg_tid_x);
    Value *lane = b.CreateAnd(tid, b.getInt64(kWarp - 1)), *warp = b.CreateLShr(tid, b.getInt64(5));
    Value *colTiles = b.CreateUDiv(b.CreateAdd(nodes, b.getInt64(kTileNodes - 1)), b.getInt64(kTileNodes));
    Value *count = b.CreateMul(b.CreateUDiv(b.CreateAdd(batch, b.getInt64(kTileRows - 1)), b.getInt64(kTileRows)),
                               colTiles);
    Value *lastRow = b.CreateSub(batch, b.getInt64(1)), *lastNode = b.CreateSub(nodes, b.getInt64(1));
    Value *first = sreg(b, Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    Value *stride = sreg(b, Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
    BasicBlock *entry = b.GetInsertBlock(), *tileLoop = BasicBlock::Create(ctx_, "tile", f),
               *exit = BasicBlock::Create(ctx_, "exit", f);
    b.CreateCondBr(b.CreateICmpULT(first, count), tileLoop, exit);

    b.SetInsertPoint(tileLoop);
    PHINode *tile = b.CreatePHI(i64, 2, "tile");
    tile->addIncoming(first, entry);
    Value *row0 = b.CreateMul(b.CreateUDiv(tile, colTiles), b.getInt64(kTileRows));
    Value *col = b.CreateAdd(b.CreateMul(b.CreateURem(tile, colTiles), b.getInt64(kTileNodes)), lane);
    Value *colIn = b.CreateICmpULT(col, nodes);
    Value *clampedCol = b.CreateSelect(colIn, col, lastNode);
    auto slot = [&](Value *which, Value *r, Value *c) { // tile[r][c], rows padded to kTileNodes + 1
      return b.CreateInBoundsGEP(t, which, b.CreateAdd(b.CreateMul(r, b.getInt64(kTileNodes + 1)), c));
    };
    auto tileRow = [&](unsigned j) { return b.CreateAdd(warp, b.getInt64(j * warps)); };

    // Rows in, a warp per row and a lane per node: every load, then every
    // shared store.
    for (unsigned input = 0; input < (k.kind == KernelKind::Backward ? 2u : 1u); ++input) {
      std::vector<Value *> loaded;
      for (unsigned j = 0; j < rowsPerWarp; ++j) {
        Value *row = b.CreateAdd(row0, tileRow(j));
        row = b.CreateSelect(b.CreateICmpULT(row, batch), row, lastRow);
        loaded.push_back(loadGlobal(b, t, f->getArg(input), b.CreateAdd(b.CreateMul(row, nodes), clampedCol)));
      }
      for (unsigned j = 0; j < rowsPerWarp; ++j)
        b.CreateStore(loaded[j], slot(tiles[input], tileRow(j), lane));
    }
    b.CreateIntrinsic(Intrinsic::nvvm_barrier0, {}, {});

    // Columns through the formulas, a warp per node and a lane per row:
    // step s is column warp + warps * (s / (kTileRows / kWarp)) and rows
    // kWarp * (s % (kTileRows / kWarp)) + lane. A loop, not unrolled: its
    // body holds every formula of the layer.
    constexpr unsigned rowGroups = kTileRows / kWarp;
    std::optional<llvm::Error> failed; // the body is emitted once
    Value *col0 = b.CreateSub(col, lane);
    counted(b, f, kTileNodes / warps * rowGroups, "column", [&](Value *step) {
      Value *c = b.CreateAdd(warp, b.CreateMul(b.CreateUDiv(step, b.getInt64(rowGroups)), b.getInt64(warps)));
      Value *r = b.CreateAdd(b.CreateMul(b.CreateURem(step, b.getInt64(rowGroups)), b.getInt64(kWarp)), lane);
      Value *node = b.CreateAdd(col0, c);
      guarded(b, f, b.CreateICmpULT(node, nodes), [&] { // the same for the whole warp
        Value *mine[2] = {slot(tiles[0], r, c), twoTiles ? slot(tiles[1], r, c) : nullptr};
        ElementIO io{f, nullptr, t, 0};
        io.preloaded[0] = b.CreateLoad(t, mine[0]);
        if (k.kind == KernelKind::Backward)
          io.preloaded[1] = b.CreateLoad(t, mine[1]);
        io.store = [&](Value *v, unsigned arg) { b.CreateStore(v, mine[arg - 2]); };
        BasicBlock *done = BasicBlock::Create(ctx_, "unit.done", f);
        if (llvm::Error e = nodeFormula(b, f, k, node, io, done))
          failed.emplace(std::move(e));
        b.SetInsertPoint(done);
      });
    });
    if (failed)
      return std::move(*failed);
    b.CreateIntrinsic(Intrinsic::nvvm_barrier0, {}, {});

    // Rows out, as they came in: every shared load, then the stores that
    // fall inside the layer.
    for (unsigned output = 0; output < (k.kind == KernelKind::Fused ? 2u : 1u); ++output) {
      std::vector<Value *> results;
      for (unsigned j = 0; j < rowsPerWarp; ++j)
        results.push_back(b.CreateLoad(t, slot(tiles[output], tileRow(j), lane)));
      for (unsigned j = 0; j < rowsPerWarp; ++j) {
        Value *row = b.CreateAdd(row0, tileRow(j));
        guarded(b, f, b.CreateAnd(b.CreateICmpULT(row, batch), colIn), [&] {
          b.CreateStore(results[j], b.CreateInBoundsGEP(t, f->getArg(2 + output), b.CreateAdd(b.CreateMul(row, nodes), col)));
        });
      }
    }
    // The next tile's loads must not overwrite a tile still being read.
    b.CreateIntrinsic(Intrinsic::nvvm_barrier0, {}, {});
    Value *next = b.CreateAdd(tile, stride);
    tile->addIncoming(next, b.GetInsertBlock());
    b.CreateCondBr(b.CreateICmpULT(next, count), tileLoop, exit);
    b.SetInsertPoint(exit);
    b.CreateRetVoid();
    return llvm::Error::success();
  }

  llvm::Error loss(const KernelRequest &r) {
    Type *t = elementType(r.dtype);
    Type *ptr = PointerType::getUnqual(ctx_), *i64 = Type::getInt64Ty(ctx_);
    auto fn = kernel(r.symbol, FunctionType::get(Type::getVoidTy(ctx_), {ptr, ptr, ptr, ptr, i64, t, ptr}, false));
    if (!fn)
      return fn.takeError();
    Function *f = *fn;
    f->addParamAttr(3, Attribute::ReadOnly);
    Value *n = f->getArg(4);
    bool sums = kindInfo(r.kind).summing;

    BasicBlock *entry = BasicBlock::Create(ctx_, "entry", f), *pre = BasicBlock::Create(ctx_, "preheader", f),
               *loop = BasicBlock::Create(ctx_, "loop", f), *exit = BasicBlock::Create(ctx_, "exit", f);
    IRBuilder<> b(entry);
    if (opt_.fastMath)
      b.setFastMathFlags(FastMathFlags::getFast());
    std::vector<Value *> slot;
    lowering_.constants(b, *r.program, f->getArg(3), t, slot);
    auto [start, step] = gridStride(b);
    b.CreateCondBr(b.CreateICmpSLT(start, n), pre, exit);

    b.SetInsertPoint(pre);
    LoadAhead ahead(b, t, {f->getArg(0), f->getArg(1)}, b.getInt64(0), start, step, n);
    b.CreateBr(loop);

    b.SetInsertPoint(loop);
    PHINode *i = b.CreatePHI(i64, 2, "i");
    i->addIncoming(start, pre);
    PHINode *acc = nullptr;
    if (sums) {
      acc = b.CreatePHI(b.getDoubleTy(), 2, "sum");
      acc->addIncoming(ConstantFP::get(b.getDoubleTy(), 0.0), pre);
    }
    std::vector<Value *> current = ahead.enter(b, i);
    ElementIO io{f, i, t, 5};
    io.preloaded[0] = current[0];
    io.preloaded[1] = current[1];
    auto accNext = lowering_.element(b, r.kind, *r.program, slot, io, acc);
    if (!accNext)
      return accNext.takeError();
    Value *next = b.CreateAdd(i, step, "i.next", true, true);
    BasicBlock *latch = b.GetInsertBlock();
    i->addIncoming(next, latch);
    ahead.close(latch);
    if (acc)
      acc->addIncoming(*accNext, latch);
    b.CreateCondBr(b.CreateICmpSLT(next, n), loop, exit);

    b.SetInsertPoint(exit);
    if (sums) {
      PHINode *mine = b.CreatePHI(b.getDoubleTy(), 2, "mine");
      mine->addIncoming(ConstantFP::get(b.getDoubleTy(), 0.0), entry);
      mine->addIncoming(*accNext, latch);
      storeWarpSum(b, f, mine, f->getArg(6), b.CreateUDiv(start, b.getInt64(kWarp)));
    }
    b.CreateRetVoid();
    return llvm::Error::success();
  }

  /// SUM(partials, count, result), a block per segment (block x) of any
  /// whole number of warps up to 1024 threads (KernelSpec.h's
  /// sumKernelThreads): thread t adds partials[segment*count + t], + ntid,
  /// ... in order, kSumLoads loads issued before their adds (an in-order
  /// GPU would otherwise wait out one load's latency per partial); each warp
  /// adds its lanes in the fixed shuffle tree, warp 0 adds the warps' totals
  /// the same way. The order depends on count and the block size alone.
  /// With a valueType, VALUE (KernelSpec.h): the total divided by the 4th
  /// argument, converted and stored at value[0].
  llvm::Error sum(const std::string &symbol, Type *valueType = nullptr) {
    Type *ptr = PointerType::getUnqual(ctx_), *i64 = Type::getInt64Ty(ctx_), *f64 = Type::getDoubleTy(ctx_);
    std::vector<Type *> params = {ptr, i64, ptr};
    if (valueType)
      params.push_back(f64);
    auto fn = kernel(symbol, FunctionType::get(Type::getVoidTy(ctx_), params, false));
    if (!fn)
      return fn.takeError();
    Function *f = *fn;
    f->addParamAttr(0, Attribute::ReadOnly);
    constexpr unsigned kSumLoads = 4;
    BasicBlock *entry = BasicBlock::Create(ctx_, "entry", f), *loop = BasicBlock::Create(ctx_, "loop", f),
               *exit = BasicBlock::Create(ctx_, "exit", f);
    IRBuilder<> b(entry);
    Value *tid = sreg(b, Intrinsic::nvvm_read_ptx_sreg_tid_x), *ntid = sreg(b, Intrinsic::nvvm_read_ptx_sreg_ntid_x);
    Value *count = f->getArg(1), *segment = sreg(b, Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    Value *partials = b.CreateInBoundsGEP(f64, f->getArg(0), b.CreateMul(segment, count));
    Value *last = b.CreateSub(count, b.getInt64(1)), *zero = ConstantFP::get(f64, 0.0);
    b.CreateCondBr(b.CreateICmpSLT(tid, count), loop, exit);

    b.SetInsertPoint(loop);
    PHINode *k = b.CreatePHI(i64, 2, "k");
    PHINode *acc = b.CreatePHI(f64, 2, "sum");
    k->addIncoming(tid, entry);
    acc->addIncoming(zero, entry);
    // Past the end: a load of the last partial (in bounds) that adds 0.
    std::vector<Value *> in, loads;
    for (unsigned j = 0; j < kSumLoads; ++j) {
      Value *at = b.CreateAdd(k, b.CreateMul(ntid, b.getInt64(j)));
      in.push_back(b.CreateICmpSLT(at, count));
      loads.push_back(loadGlobal(b, f64, partials, b.CreateSelect(in.back(), at, last)));
    }
    Value *accNext = acc;
    for (unsigned j = 0; j < kSumLoads; ++j)
      accNext = b.CreateFAdd(accNext, b.CreateSelect(in[j], loads[j], zero));
    Value *kNext = b.CreateAdd(k, b.CreateMul(ntid, b.getInt64(kSumLoads)));
    k->addIncoming(kNext, loop);
    acc->addIncoming(accNext, loop);
    b.CreateCondBr(b.CreateICmpSLT(kNext, count), loop, exit);

    b.SetInsertPoint(exit);
    PHINode *mine = b.CreatePHI(f64, 2, "mine");
    mine->addIncoming(zero, entry);
    mine->addIncoming(accNext, loop);
    // Every thread reaches the shuffles and barriers below.
    Value *lane = b.CreateAnd(tid, b.getInt64(kWarp - 1)), *warp = b.CreateLShr(tid, b.getInt64(5));
    Value *warpTotals = sharedArray(b, symbol + ".warps", f64, kMaxWarps);
    Value *slot = b.CreateInBoundsGEP(f64, warpTotals, warp);
    Value *total = warpSum(b, mine);
    guarded(b, f, b.CreateICmpEQ(lane, b.getInt64(0)), [&] { b.CreateStore(total, slot); });
    b.CreateIntrinsic(Intrinsic::nvvm_barrier0, {}, {});
    Value *warps = b.CreateLShr(ntid, b.getInt64(5));
    guarded(b, f, b.CreateICmpEQ(warp, b.getInt64(0)), [&] {
      Value *have = b.CreateICmpULT(lane, warps);
      Value *v = b.CreateLoad(f64, b.CreateInBoundsGEP(f64, warpTotals, b.CreateSelect(have, lane, b.getInt64(0))));
      Value *all = warpSum(b, b.CreateSelect(have, v, zero));
      guarded(b, f, b.CreateICmpEQ(lane, b.getInt64(0)), [&] {
        if (!valueType) {
          b.CreateStore(all, b.CreateInBoundsGEP(f64, f->getArg(2), segment));
          return;
        }
        Value *value = b.CreateFDiv(all, f->getArg(3));
        b.CreateStore(valueType == f64 ? value : b.CreateFPTrunc(value, valueType), f->getArg(2));
      });
    });
    b.CreateRetVoid();
    return llvm::Error::success();
  }

  /// LAYER_CONSTANT_GRADIENT(z, err, partials, params, units, offsets, batch,
  /// nodes, firstNode): for each node (grid y, from firstNode) the sums over
  /// its batch of err * df/dc, one per constant c of its formula; x walks the
  /// batch. Each warp leaves one partial per (node, c) at
  /// partials[(node*K + c)*warpsPerNode + warp], K the most constants of any
  /// formula; `sum` adds them, a segment per (node, c). Sums are in double,
  /// as on the CPU; every lane reaches the shuffles, with or without elements.
  llvm::Error layerConstantGradient(const GpuLayerKernel &k) {
    Type *t = elementType(k.dtype);
    Type *ptr = PointerType::getUnqual(ctx_), *i64 = Type::getInt64Ty(ctx_), *f64 = Type::getDoubleTy(ctx_);
    auto fn = kernel(k.symbol, FunctionType::get(Type::getVoidTy(ctx_), {ptr, ptr, ptr, ptr, ptr, ptr, i64, i64, i64}, false));
    if (!fn)
      return fn.takeError();
    Function *f = *fn;
    for (unsigned readOnly : {0u, 1u, 3u, 4u, 5u})
      f->addParamAttr(readOnly, Attribute::ReadOnly);
    size_t K = 0;
    for (const Program *p : k.units)
      K = std::max(K, p->outputs.size());
    Value *batch = f->getArg(6), *nodes = f->getArg(7), *firstNode = f->getArg(8);

    BasicBlock *entry = BasicBlock::Create(ctx_, "entry", f), *loop = BasicBlock::Create(ctx_, "loop", f),
               *latch = BasicBlock::Create(ctx_, "latch", f), *exit = BasicBlock::Create(ctx_, "exit", f);
    IRBuilder<> b(entry);
    if (opt_.fastMath)
      b.setFastMathFlags(FastMathFlags::getFast());
    auto [start, step] = gridStride(b);
    Value *node = b.CreateAdd(firstNode, sreg(b, Intrinsic::nvvm_read_ptx_sreg_ctaid_y));
    Value *unit = b.CreateLoad(b.getInt32Ty(), b.CreateInBoundsGEP(b.getInt32Ty(), f->getArg(4), node), "unit");
    Value *offset = b.CreateLoad(i64, b.CreateInBoundsGEP(i64, f->getArg(5), node), "offset");
    Value *params = b.CreateInBoundsGEP(f64, f->getArg(3), offset);
    b.CreateCondBr(b.CreateICmpSLT(start, batch), loop, exit);

    b.SetInsertPoint(loop);
    PHINode *i = b.CreatePHI(i64, 2, "i");
    i->addIncoming(start, entry);
    std::vector<PHINode *> acc = zeroSums(b, K, entry);
    Value *at = k.layout == Layout::NodesMajor ? b.CreateAdd(b.CreateMul(node, batch), i) : b.CreateAdd(b.CreateMul(i, nodes), node);
    Value *z = b.CreateLoad(t, b.CreateInBoundsGEP(t, f->getArg(0), at));
    Value *err = b.CreateFPExt(b.CreateLoad(t, b.CreateInBoundsGEP(t, f->getArg(1), at)), f64);
    // Each formula's sums, merged in the latch (fewer constants: unchanged).
    std::vector<std::vector<std::pair<Value *, BasicBlock *>>> incoming(K);
    for (size_t c = 0; c < K; ++c)
      incoming[c].push_back({acc[c], loop});
    SwitchInst *sw = b.CreateSwitch(unit, latch, unsigned(k.units.size()));
    for (size_t u = 0; u < k.units.size(); ++u) {
      const Program &p = *k.units[u];
      BasicBlock *body = BasicBlock::Create(ctx_, "unit" + std::to_string(u), f, latch);
      sw->addCase(b.getInt32(uint32_t(u)), body);
      b.SetInsertPoint(body);
      std::vector<Value *> slot;
      lowering_.constants(b, p, params, t, slot);
      Value *vars[3] = {z, nullptr, nullptr};
      if (llvm::Error e = lowering_.evaluate(b, p, slot, vars, t))
        return e;
      for (size_t c = 0; c < K; ++c) {
        Value *v = acc[c];
        if (c < p.outputs.size())
          v = b.CreateFAdd(acc[c], b.CreateFMul(err, b.CreateFPExt(slot[p.outputs[c]], f64)));
        incoming[c].push_back({v, b.GetInsertBlock()});
      }
      b.CreateBr(latch);
    }

    b.SetInsertPoint(latch);
    std::vector<Value *> merged;
    for (size_t c = 0; c < K; ++c) {
      PHINode *m = b.CreatePHI(f64, unsigned(incoming[c].size()), "merged");
      for (auto &[v, from] : incoming[c])
        m->addIncoming(v, from);
      acc[c]->addIncoming(m, latch);
      merged.push_back(m);
    }
    Value *next = b.CreateAdd(i, step, "i.next", true, true);
    i->addIncoming(next, latch);
    b.CreateCondBr(b.CreateICmpSLT(next, batch), loop, exit);

    b.SetInsertPoint(exit);
    Value *warp = b.CreateUDiv(start, b.getInt64(kWarp)), *warps = b.CreateUDiv(step, b.getInt64(kWarp));
    std::vector<Value *> mine = exitSums(b, entry, latch, merged);
    for (size_t c = 0; c < K; ++c) {
      Value *segment = b.CreateAdd(b.CreateMul(node, b.getInt64(K)), b.getInt64(c));
      storeWarpSum(b, f, mine[c], f->getArg(2), b.CreateAdd(b.CreateMul(segment, warps), warp));
    }
    b.CreateRetVoid();
    return llvm::Error::success();
  }

  /// LOSS_CONSTANT_GRADIENT(y_pred, y_true, partials, params, n): the sums
  /// over the elements of dl/dc, one per constant; each warp leaves one
  /// partial per constant at partials[c*warps + warp] for `sum` (a segment
  /// per constant). The host applies the reduction's scale.
  llvm::Error lossConstantGradient(const KernelRequest &r) {
    Type *t = elementType(r.dtype);
    Type *ptr = PointerType::getUnqual(ctx_), *i64 = Type::getInt64Ty(ctx_), *f64 = Type::getDoubleTy(ctx_);
    auto fn = kernel(r.symbol, FunctionType::get(Type::getVoidTy(ctx_), {ptr, ptr, ptr, ptr, i64}, false));
    if (!fn)
      return fn.takeError();
    Function *f = *fn;
    for (unsigned readOnly : {0u, 1u, 3u})
      f->addParamAttr(readOnly, Attribute::ReadOnly);
    const Program &p = *r.program;
    size_t K = p.outputs.size();
    Value *n = f->getArg(4);
    BasicBlock *entry = BasicBlock::Create(ctx_, "entry", f), *loop = BasicBlock::Create(ctx_, "loop", f),
               *exit = BasicBlock::Create(ctx_, "exit", f);
    IRBuilder<> b(entry);
    if (opt_.fastMath)
      b.setFastMathFlags(FastMathFlags::getFast());
    std::vector<Value *> slot;
    lowering_.constants(b, p, f->getArg(3), t, slot);
    auto [start, step] = gridStride(b);
    b.CreateCondBr(b.CreateICmpSLT(start, n), loop, exit);

    b.SetInsertPoint(loop);
    PHINode *i = b.CreatePHI(i64, 2, "i");
    i->addIncoming(start, entry);
    std::vector<PHINode *> acc = zeroSums(b, K, entry);
    Value *vars[3] = {nullptr, b.CreateLoad(t, b.CreateInBoundsGEP(t, f->getArg(0), i)),
                      b.CreateLoad(t, b.CreateInBoundsGEP(t, f->getArg(1), i))};
    if (llvm::Error e = lowering_.evaluate(b, p, slot, vars, t))
      return e;
    std::vector<Value *> next;
    for (size_t c = 0; c < K; ++c)
      next.push_back(b.CreateFAdd(acc[c], b.CreateFPExt(slot[p.outputs[c]], f64)));
    Value *iNext = b.CreateAdd(i, step, "i.next", true, true);
    BasicBlock *latch = b.GetInsertBlock();
    i->addIncoming(iNext, latch);
    for (size_t c = 0; c < K; ++c)
      acc[c]->addIncoming(next[c], latch);
    b.CreateCondBr(b.CreateICmpSLT(iNext, n), loop, exit);

    b.SetInsertPoint(exit);
    Value *warp = b.CreateUDiv(start, b.getInt64(kWarp)), *warps = b.CreateUDiv(step, b.getInt64(kWarp));
    std::vector<Value *> mine = exitSums(b, entry, latch, next);
    for (size_t c = 0; c < K; ++c)
      storeWarpSum(b, f, mine[c], f->getArg(2), b.CreateAdd(b.CreateMul(b.getInt64(c), warps), warp));
    b.CreateRetVoid();
    return llvm::Error::success();
  }

private:
  /// One element through `node`'s formula: its unit and constants looked up,
  /// then a switch over the kernel's units, every case branching to `done`.
  llvm::Error nodeFormula(IRBuilder<> &b, Function *f, const GpuLayerKernel &k, Value *node, ElementIO &io,
                          BasicBlock *done) {
    auto [unit, params] = nodeUnit(b, f, node);
    SwitchInst *sw = b.CreateSwitch(unit, done, unsigned(k.units.size()));
    for (size_t u = 0; u < k.units.size(); ++u) {
      BasicBlock *body = BasicBlock::Create(ctx_, "unit" + std::to_string(u), f, done);
      sw->addCase(b.getInt32(uint32_t(u)), body);
      b.SetInsertPoint(body);
      std::vector<Value *> constants;
      lowering_.constants(b, *k.units[u], params, io.t, constants);
      if (auto r = lowering_.element(b, k.kind, *k.units[u], constants, io, nullptr); !r)
        return r.takeError();
      b.CreateBr(done);
    }
    return llvm::Error::success();
  }

  /// A layer node's unit (its formula's index in the kernel) and where its
  /// constants start in params.
  std::pair<Value *, Value *> nodeUnit(IRBuilder<> &b, Function *f, Value *node) {
    Type *i64 = b.getInt64Ty();
    Value *unit = b.CreateLoad(b.getInt32Ty(), b.CreateInBoundsGEP(b.getInt32Ty(), f->getArg(5), node), "unit");
    Value *offset = b.CreateLoad(i64, b.CreateInBoundsGEP(i64, f->getArg(6), node), "offset");
    return {unit, b.CreateInBoundsGEP(b.getDoubleTy(), f->getArg(4), offset)};
  }

  /// A kTileRows x (kTileNodes + 1) array of t in shared memory.
  Value *sharedTile(IRBuilder<> &b, const std::string &name, Type *t) {
    return sharedArray(b, name, t, kTileRows * (kTileNodes + 1));
  }

  /// for (i = 0; i < n; ++i) body(i): a loop kept rolled (its body may
  /// hold every formula of the layer).
  void counted(IRBuilder<> &b, Function *f, unsigned n, const std::string &name, const std::function<void(Value *)> &body) {
    BasicBlock *before = b.GetInsertBlock(), *loop = BasicBlock::Create(ctx_, name, f),
               *after = BasicBlock::Create(ctx_, name + ".done", f);
    b.CreateBr(loop);
    b.SetInsertPoint(loop);
    PHINode *i = b.CreatePHI(b.getInt64Ty(), 2, name + ".i");
    i->addIncoming(b.getInt64(0), before);
    body(i);
    Value *next = b.CreateAdd(i, b.getInt64(1));
    i->addIncoming(next, b.GetInsertBlock());
    BranchInst *back = b.CreateCondBr(b.CreateICmpULT(next, b.getInt64(n)), loop, after);
    MDNode *disable = MDNode::get(ctx_, MDString::get(ctx_, "llvm.loop.unroll.disable"));
    MDNode *id = MDNode::getDistinct(ctx_, {nullptr, disable});
    id->replaceOperandWith(0, id);
    back->setMetadata(LLVMContext::MD_loop, id);
    b.SetInsertPoint(after);
  }

  /// A layer kernel's entry point, with the ABI of KernelSpec.h: (z, err,
  /// out0, out1, params, unitOf, offsets, batch, nodes, firstNode).
  llvm::Expected<Function *> layerKernel(const std::string &symbol, unsigned threads) {
    Type *ptr = PointerType::getUnqual(ctx_), *i64 = Type::getInt64Ty(ctx_);
    auto fn = kernel(symbol, FunctionType::get(Type::getVoidTy(ctx_), {ptr, ptr, ptr, ptr, ptr, ptr, ptr, i64, i64, i64}, false),
                     threads);
    if (fn)
      for (unsigned readOnly : {4u, 5u, 6u})
        (*fn)->addParamAttr(readOnly, Attribute::ReadOnly);
    return fn;
  }

  /// K running sums in double at the top of a loop, 0 when entered from `from`.
  std::vector<PHINode *> zeroSums(IRBuilder<> &b, size_t K, BasicBlock *from) {
    std::vector<PHINode *> sums;
    for (size_t c = 0; c < K; ++c) {
      sums.push_back(b.CreatePHI(b.getDoubleTy(), 2, "sum"));
      sums.back()->addIncoming(ConstantFP::get(b.getDoubleTy(), 0.0), from);
    }
    return sums;
  }

  /// A thread's sums where its loop ends: 0 from `entry` (no element),
  /// else the loop's; every phi first, before the shuffles add blocks.
  std::vector<Value *> exitSums(IRBuilder<> &b, BasicBlock *entry, BasicBlock *latch, const std::vector<Value *> &sums) {
    std::vector<Value *> mine;
    IRBuilder<>::InsertPointGuard guard(b);
    b.SetInsertPoint(b.GetInsertBlock(), b.GetInsertBlock()->getFirstInsertionPt());
    for (Value *s : sums) {
      PHINode *phi = b.CreatePHI(b.getDoubleTy(), 2, "mine");
      phi->addIncoming(ConstantFP::get(b.getDoubleTy(), 0.0), entry);
      phi->addIncoming(s, latch);
      mine.push_back(phi);
    }
    return mine;
  }

};

} // namespace

llvm::Error emitGpuKernels(Module &module, const GpuModuleSpec &spec, const EmitOptions &options) {
  if (!options.gpu)
    return make_error<StringError>("GPU kernels need EmitOptions::gpu", inconvertibleErrorCode());
  GpuKernelBuilder kb(module, options);
  for (const GpuLayerKernel &k : spec.layers)
    if (llvm::Error e = k.kind == KernelKind::ConstantGradient ? kb.layerConstantGradient(k) : kb.layer(k))
      return e;
  for (const KernelRequest &r : spec.losses) {
    if (!isLoss(r.kind))
      return make_error<StringError>("GPU kernel " + r.symbol + " is not a loss kernel", inconvertibleErrorCode());
    if (llvm::Error e = r.kind == KernelKind::LossConstantGradient ? kb.lossConstantGradient(r) : kb.loss(r))
      return e;
  }
  for (const GpuPopulationKernel &k : spec.populations)
    if (llvm::Error e = emitPopulationKernel(module, k, options))
      return e;
  if (!spec.sumKernel.empty())
    if (llvm::Error e = kb.sum(spec.sumKernel))
      return e;
  if (!spec.valueKernel.empty()) {
    Type *t = spec.valueType == DType::F32 ? Type::getFloatTy(module.getContext()) : Type::getDoubleTy(module.getContext());
    if (llvm::Error e = kb.sum(spec.valueKernel, t))
      return e;
  }
  return llvm::Error::success();
}

} // namespace hsnn::detail
