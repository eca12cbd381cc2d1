//===- lib/CodeGen/RowKernel.cpp - Batch-major segments without transposes ===//
//
// A row kernel runs a segment of a batch-major layer in place (RowPlan.h),
// row by row along the row: `lanes` periods of P nodes at a time are P
// vector loads, shuffled into one vector per slot (each lane one period),
// each slot's tape with its nodes' constants as one vector load each, and
// the results shuffled back into P vector stores. Every lane goes through
// the same operations as in the nodes-major kernels (same vector math
// functions, same order), so both layouts give the same bits.
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Module.h>

#include <llvm/ADT/bit.h>

#include <algorithm>
#include <array>
#include <functional>
#include <string_view>

namespace hsnn::detail {

using namespace llvm;

namespace {

// One vector whose lane l is src[from(l).first][from(l).second], built as a
// chain of two-source shuffles (each one permute instruction on AVX-512).
Value *permuteLanes(IRBuilder<> &b, ArrayRef<Value *> src, unsigned lanes,
                    const std::function<std::pair<unsigned, unsigned>(unsigned)> &from) {
  if (src.size() == 1)
    return src[0];
  std::vector<std::pair<unsigned, unsigned>> where(lanes);
  std::vector<unsigned> order; // source vectors in first-use order
  for (unsigned l = 0; l < lanes; ++l) {
    where[l] = from(l);
    if (std::find(order.begin(), order.end(), where[l].first) == order.end())
      order.push_back(where[l].first);
  }
  // Lanes from order[0] and order[1] first, then one source more per step.
  SmallVector<int, 32> mask(lanes, -1);
  for (unsigned l = 0; l < lanes; ++l)
    if (where[l].first == order[0])
      mask[l] = int(where[l].second);
    else if (order.size() > 1 && where[l].first == order[1])
      mask[l] = int(lanes + where[l].second);
  Value *v = b.CreateShuffleVector(src[order[0]], order.size() > 1 ? src[order[1]] : src[order[0]], mask);
  for (size_t k = 2; k < order.size(); ++k) {
    for (unsigned l = 0; l < lanes; ++l)
      mask[l] = where[l].first == order[k] ? int(lanes + where[l].second) : int(l);
    v = b.CreateShuffleVector(v, src[order[k]], mask);
  }
  return v;
}

// Where a block's elements are: element e (= vector index * lanes + lane)
// has address bits e_0, e_1, ...; vec[i] names the address bit that bit i of
// the vector index holds, lane[j] the one lane bit j holds. Loaded, bit i of
// e is where it was stored; a shuffle round moves one vector-index bit into
// the lanes and one lane bit out.
struct BitLayout {
  std::vector<unsigned> vec, lane;

  unsigned address(unsigned vector, unsigned lane_) const {
    unsigned e = 0;
    for (size_t i = 0; i < vec.size(); ++i)
      e |= ((vector >> i) & 1u) << vec[i];
    for (size_t j = 0; j < lane.size(); ++j)
      e |= ((lane_ >> j) & 1u) << lane[j];
    return e;
  }
  std::pair<unsigned, unsigned> place(unsigned e) const {
    unsigned v = 0, l = 0;
    for (size_t i = 0; i < vec.size(); ++i)
      v |= ((e >> vec[i]) & 1u) << i;
    for (size_t j = 0; j < lane.size(); ++j)
      l |= ((e >> lane[j]) & 1u) << j;
    return {v, l};
  }
};

// One round from layout `from` to `to`, which differ in vector bit i and in
// lane bits: output vector o and its partner o ^ (1 << i) each come from the
// two inputs with those indices, one two-source shuffle per output.
std::vector<Value *> shuffleRound(IRBuilder<> &b, const std::vector<Value *> &x, const BitLayout &from,
                                  const BitLayout &to, unsigned i) {
  const unsigned lanes = 1u << to.lane.size();
  std::vector<Value *> y(x.size());
  for (unsigned o = 0; o < x.size(); ++o) {
    unsigned lo = o & ~(1u << i);
    SmallVector<int, 32> mask;
    for (unsigned l = 0; l < lanes; ++l) {
      auto [v, at] = from.place(to.address(o, l));
      mask.push_back(int(at + ((v >> i) & 1u) * lanes));
    }
    y[o] = b.CreateShuffleVector(x[lo], x[lo | (1u << i)], mask);
  }
  return y;
}

// The layouts a block goes through to put slot s of a period of P = 2^k
// nodes in vector s: one round per slot bit, each taking that bit out of the
// lanes into vector bit r. Which lane bits a round may move decides its
// cost: within a 128-bit block (q bits) an unpck or shufps, the top block
// bit a 128-bit shuffle (vshuff32x4, vperm2f128); other block bits need a
// general two-source permute (vpermt2ps/pd). Measured on Zen 4 (zmm,
// independent ops), unpck/shufps have the most throughput, then
// vshuff32x4, then vpermt2ps, below even vaddps; the old plan of log2(P)
// vpermt2ps rounds each way left W1's batch-major forward further behind
// its nodes-major time than this one. Bits inside a block are taken through lane bit
// 0 with a rotation of the block's bits (shufps 0x88/0xDD; undone by
// unpcklps/unpckhps), so every period bit sent into a block lands there
// and the block bits are swapped in place. The periods end up in lane
// order `BitLayout::lane` (periodOfLane).
std::vector<BitLayout> slotPlan(unsigned P, unsigned lanes, unsigned elemBits) {
  const unsigned k = unsigned(llvm::countr_zero(P)), m = unsigned(llvm::countr_zero(lanes));
  const unsigned q = std::min(m, unsigned(llvm::countr_zero(128u / elemBits)));
  BitLayout at;
  for (unsigned i = 0; i < k; ++i)
    at.vec.push_back(m + i);
  for (unsigned j = 0; j < m; ++j)
    at.lane.push_back(j);
  std::vector<BitLayout> plan{at};
  for (unsigned r = 0; r < k; ++r) {
    unsigned p = unsigned(std::find(at.lane.begin(), at.lane.end(), r) - at.lane.begin());
    unsigned sent = at.vec[r];
    at.vec[r] = r;
    if (p < q) { // rotate the block's bits down, the period bit in on top
      for (unsigned j = p; j + 1 < q; ++j)
        at.lane[j] = at.lane[j + 1];
      at.lane[q - 1] = sent;
    } else {
      at.lane[p] = sent;
    }
    plan.push_back(at);
  }
  return plan;
}

// The vector bit a round between two consecutive layouts works on.
unsigned roundBit(const BitLayout &a, const BitLayout &b) {
  return unsigned(std::mismatch(a.vec.begin(), a.vec.end(), b.vec.begin()).first - a.vec.begin());
}

// When passes of several blocks pay: from this many instructions per vector
// math call in a block's tapes, and up to this many calls times slots (each
// call spills every vector live across it, up to P a block).
constexpr size_t kInstructionsPerCall = 16, kMaxCallsTimesSlots = 32;

// What one block's tapes cost: the instructions they emit, and how many of
// those are calls to functions (vector math; intrinsics are not).
struct TapeCost {
  size_t instructions = 0, calls = 0;
  std::vector<size_t> slotCalls; // per slot
};
size_t callsIn(const Function &fn) {
  size_t n = 0;
  for (const Instruction &i : instructions(fn))
    if (const auto *call = dyn_cast<CallInst>(&i))
      n += call->getCalledFunction() && !call->getCalledFunction()->isIntrinsic();
  return n;
}

bool powerOfTwoPlan(unsigned P, unsigned lanes) { return P > 1 && (P & (P - 1)) == 0 && P <= lanes; }

// Splits P vectors holding a sequence x (element e of vector e / lanes)
// into P vectors, vector s holding slot s of each period (x[s + P*q] for
// the lanes' periods q, in periodOfLane's order). For P a power of two up
// to `lanes`, log2(P) rounds of P shuffles (slotPlan); otherwise a chain of
// shuffles per output, periods in order.
std::vector<Value *> deinterleave(IRBuilder<> &b, std::vector<Value *> x, unsigned lanes, unsigned elemBits) {
  const unsigned P = unsigned(x.size());
  if (powerOfTwoPlan(P, lanes)) {
    std::vector<BitLayout> plan = slotPlan(P, lanes, elemBits);
    for (size_t r = 1; r < plan.size(); ++r)
      x = shuffleRound(b, x, plan[r - 1], plan[r], roundBit(plan[r - 1], plan[r]));
    return x; // slotPlan puts slot bit r in vector bit r
  }
  std::vector<Value *> out;
  for (unsigned s = 0; s < P; ++s)
    out.push_back(permuteLanes(b, x, lanes, [&](unsigned l) {
      return std::pair<unsigned, unsigned>{(l * P + s) / lanes, (l * P + s) % lanes};
    }));
  return out;
}

// The inverse: P vectors, vector s holding slot s, into the sequence x.
std::vector<Value *> interleave(IRBuilder<> &b, std::vector<Value *> slots, unsigned lanes, unsigned elemBits) {
  const unsigned P = unsigned(slots.size());
  if (powerOfTwoPlan(P, lanes)) {
    std::vector<BitLayout> plan = slotPlan(P, lanes, elemBits);
    for (size_t r = plan.size() - 1; r > 0; --r)
      slots = shuffleRound(b, slots, plan[r], plan[r - 1], roundBit(plan[r], plan[r - 1]));
    return slots;
  }
  std::vector<Value *> out;
  for (unsigned v = 0; v < P; ++v)
    out.push_back(permuteLanes(b, slots, lanes, [&](unsigned l) {
      unsigned e = v * lanes + l;
      return std::pair<unsigned, unsigned>{e % P, e / P};
    }));
  return out;
}

// Lane l of a slot vector holds period periodOfLane[l] of its block.
std::vector<int> periodOfLane(unsigned P, unsigned lanes, unsigned elemBits) {
  std::vector<int> period(lanes);
  for (unsigned l = 0; l < lanes; ++l)
    period[l] = int(l);
  if (powerOfTwoPlan(P, lanes)) {
    const BitLayout last = slotPlan(P, lanes, elemBits).back();
    const unsigned k = unsigned(llvm::countr_zero(P));
    for (unsigned l = 0; l < lanes; ++l)
      period[l] = int(last.address(0, l) >> k);
  }
  return period;
}

} // namespace

llvm::Error emitRowKernel(Module &m, const KernelRequest &r, const EmitOptions &o) {
  LLVMContext &ctx = m.getContext();
  if (m.getFunction(r.symbol))
    return make_error<StringError>("duplicate kernel symbol " + r.symbol, inconvertibleErrorCode());
  if (isLoss(r.kind) || kindInfo(r.kind).constants)
    return make_error<StringError>("a row kernel is elementwise over a layer", inconvertibleErrorCode());
  Type *et = r.dtype == DType::F32 ? Type::getFloatTy(ctx) : Type::getDoubleTy(ctx);
  Type *ptr = PointerType::getUnqual(ctx), *i64 = Type::getInt64Ty(ctx);
  auto *fty = FunctionType::get(Type::getVoidTy(ctx), {ptr, ptr, ptr, ptr, ptr, i64, i64, i64, i64}, false);
  Function *fn = Function::Create(fty, Function::ExternalLinkage, r.symbol, m);
  setCpuKernelAttributes(*fn, o);
  fn->addParamAttr(4, Attribute::ReadOnly);
  Value *table = fn->getArg(4), *rows = fn->getArg(5), *ld = fn->getArg(6), *periods = fn->getArg(7),
        *stride = fn->getArg(8);

  const unsigned P = unsigned(r.rowSlots.size());
  const std::vector<size_t> constantRows = rowConstantRows(r.rowSlots);
  unsigned elemBits = unsigned(et->getPrimitiveSizeInBits().getFixedValue());
  unsigned lanes = std::max(1u, o.vectorBits / elemBits);
  auto *vt = FixedVectorType::get(et, lanes);
  Align align(elemBits / 8);
  ElementLowering lowering(m, o);

  BasicBlock *entry = BasicBlock::Create(ctx, "entry", fn), *head = BasicBlock::Create(ctx, "next", fn),
             *exit = BasicBlock::Create(ctx, "exit", fn);
  IRBuilder<> b(entry);
  if (o.fastMath)
    b.setFastMathFlags(FastMathFlags::getFast());
  SmallVector<Constant *, 16> iotaLanes;
  for (unsigned l = 0; l < lanes; ++l)
    iotaLanes.push_back(b.getInt64(l));
  Constant *iota = ConstantVector::get(iotaLanes);
  unsigned inputs = r.kind == KernelKind::Backward ? 2 : 1;
  unsigned outputs = r.kind == KernelKind::Fused ? 2 : 1;
  std::vector<Value *> buffers;
  for (unsigned k = 0; k < inputs + outputs; ++k)
    buffers.push_back(b.CreateAlloca(ArrayType::get(et, uint64_t(P) * lanes), nullptr, "partial"));

  // The blocks of `lanes` periods: each row's full blocks, then its partial
  // one (fewer periods left than lanes). Full blocks go in memory order
  // across rows, up to RowShape::blocksPerPass a pass: on Zen 4 a block's slots are
  // long dependency chains (gelu's erfc, inline exp) that out-of-order
  // execution did not overlap with the next block's, so the pass's copies
  // of a slot are emitted side by side (with four blocks a pass W1's
  // batch-major forward came close to its nodes-major time; with one it
  // stayed well behind).
  // A row's partial block runs alone, through stack buffers with masked
  // copies, as soon as its full blocks are done, so the streams stay
  // sequential for the prefetchers (blocks taken down the rows, 1 KiB
  // apart, measured several times slower: every load a miss). Plain vector
  // loads and stores elsewhere: AVX-512 masked ones measured much slower on
  // Zen 4 even with every lane set.
  Value *fullPerRow = b.CreateUDiv(periods, b.getInt64(lanes));
  Value *fullEnd = b.CreateMul(fullPerRow, b.getInt64(lanes));
  Value *partialPeriods = b.CreateSub(periods, fullEnd);
  Value *totalFull = b.CreateMul(rows, fullPerRow);
  Value *anyPartial = b.CreateICmpSGT(partialPeriods, b.getInt64(0));
  b.CreateCondBr(b.CreateAnd(b.CreateICmpSGT(rows, b.getInt64(0)), b.CreateICmpSGT(periods, b.getInt64(0))), head,
                 exit);

  // The next full block after (row, q).
  auto advance = [&](Value *row, Value *q) -> std::pair<Value *, Value *> {
    Value *next = b.CreateAdd(q, b.getInt64(lanes));
    Value *wrap = b.CreateICmpSGE(next, fullEnd);
    return {b.CreateAdd(row, b.CreateZExt(wrap, i64)), b.CreateSelect(wrap, b.getInt64(0), next)};
  };
  auto arraysAt = [&](Value *row, Value *q, unsigned first, unsigned count) {
    std::vector<Value *> at;
    Value *base = b.CreateAdd(b.CreateMul(row, ld), b.CreateMul(q, b.getInt64(P)));
    for (unsigned k = 0; k < count; ++k)
      at.push_back(b.CreateInBoundsGEP(et, fn->getArg(first + k), base));
    return at;
  };
  auto vectorIn = [&](Value *p, unsigned v) { return b.CreateConstInBoundsGEP1_64(et, p, uint64_t(v) * lanes); };

  // Slot s, lane l is the block's element lanePeriods[l]*P + s; the
  // constants table holds periods in order, so a slot's constants are
  // shuffled the same way when the lanes are not. A backward kernel's err
  // is not shuffled: f'(z) is, back into element order, and multiplied
  // there (the same product per element, a third fewer permutes).
  const std::vector<int> lanePeriods = periodOfLane(P, lanes, elemBits);
  const bool inOrder = std::is_sorted(lanePeriods.begin(), lanePeriods.end());
  const bool backward = r.kind == KernelKind::Backward;
  struct Block {
    std::vector<Value *> in, out; // arrays' first element of the block
    Value *q;                     // its first period
  };
  auto emitBlocks = [&](ArrayRef<Block> blocks, ArrayRef<unsigned> order, TapeCost *cost = nullptr) -> llvm::Error {
    // Per block, per input array, per slot, its vector.
    std::vector<std::vector<std::vector<Value *>>> in(blocks.size(), std::vector<std::vector<Value *>>(inputs));
    for (size_t k = 0; k < blocks.size(); ++k)
      for (unsigned a = 0; a < (backward ? 1 : inputs); ++a) {
        std::vector<Value *> loaded(P);
        for (unsigned v = 0; v < P; ++v)
          loaded[v] = b.CreateAlignedLoad(vt, vectorIn(blocks[k].in[a], v), align);
        in[k][a] = deinterleave(b, std::move(loaded), lanes, elemBits);
      }
    // Per block, per output array (2: out0, 3: out1), per slot, its vector.
    std::vector<std::array<std::vector<Value *>, 2>> outs(blocks.size(),
                                                          {std::vector<Value *>(P), std::vector<Value *>(P)});
    for (unsigned s : order)
      for (size_t k = 0; k < blocks.size(); ++k) {
        std::vector<Value *> slot;
        // The table has `lanes` elements of padding: the last block's loads
        // stay inside it, and dead lanes are never stored.
        lowering.constants(b, *r.rowSlots[s], nullptr, vt, slot, [&](unsigned j) -> Value * {
          Value *at = b.CreateAdd(b.CreateMul(b.getInt64(constantRows[s] + j), stride), blocks[k].q);
          Value *c = b.CreateAlignedLoad(vt, b.CreateInBoundsGEP(et, table, at), align);
          return inOrder ? c : b.CreateShuffleVector(c, lanePeriods);
        });
        // This block's input lines kPrefetchBytes on, one per slot, spread
        // through the pass: a pass loads its blocks in one burst and then
        // computes for hundreds of cycles without touching memory, and the
        // hardware prefetchers did not keep up: at 2^24 elements a row
        // kernel took its in-cache time plus the copy's. The prefetches
        // made W1's forward, backward and fused kernels faster, 4 KiB ahead
        // more than 1, 2 or 8; prefetching the outputs for writing too made
        // fused slower (the DEVLOG has the runs).
        if (o.rowShape.prefetchBytes)
          for (unsigned a = 0; a < inputs; ++a)
            prefetchAhead(b, vectorIn(blocks[k].in[a], s), o.rowShape.prefetchBytes);
        ElementIO io{fn, nullptr, vt, 0};
        for (unsigned a = 0; a < inputs; ++a)
          io.preloaded[a] = in[k][a].empty() ? nullptr : in[k][a][s];
        io.store = [&, k, s](Value *v, unsigned arg) { outs[k][arg - 2][s] = v; };
        // A backward tape's output is f'(z): stored as a forward kernel would.
        KernelKind kind = backward ? KernelKind::Forward : r.kind;
        size_t before = cost ? fn->getInstructionCount() : 0;
        llvm::Expected<Value *> done = lowering.element(b, kind, *r.rowSlots[s], slot, io, nullptr);
        if (!done)
          return done.takeError();
        if (cost) {
          cost->instructions += fn->getInstructionCount() - before;
          size_t calls = callsIn(*fn); // the function holds this one copy of the tapes
          cost->slotCalls[s] = calls - cost->calls;
          cost->calls = calls;
        }
      }
    // Stored vector v, lane l is element e = v*lanes + l: slot e % P, lane e / P.
    for (size_t k = 0; k < blocks.size(); ++k)
      for (unsigned o = 0; o < outputs; ++o) {
        std::vector<Value *> x = interleave(b, std::move(outs[k][o]), lanes, elemBits);
        for (unsigned v = 0; v < P; ++v) {
          if (backward) // err * f'(z), as ElementLowering::element multiplies
            x[v] = b.CreateFMul(b.CreateAlignedLoad(vt, vectorIn(blocks[k].in[1], v), align), x[v]);
          b.CreateAlignedStore(x[v], vectorIn(blocks[k].out[o], v), align);
        }
      }
    return llvm::Error::success();
  };

  // The loop's state: full blocks done, the next one's row and first
  // period, and the next row whose partial block is pending.
  BasicBlock *fullBlocks = BasicBlock::Create(ctx, "full.blocks", fn), *pass = BasicBlock::Create(ctx, "pass", fn),
             *oneFull = BasicBlock::Create(ctx, "one.full", fn), *one = BasicBlock::Create(ctx, "one", fn),
             *tailIn = BasicBlock::Create(ctx, "partial.in", fn), *body = BasicBlock::Create(ctx, "body", fn),
             *tailOut = BasicBlock::Create(ctx, "partial.out", fn), *oneDone = BasicBlock::Create(ctx, "one.done", fn),
             *partial = BasicBlock::Create(ctx, "partial", fn);
  b.SetInsertPoint(head);
  PHINode *done = b.CreatePHI(i64, 3, "done"), *row = b.CreatePHI(i64, 3, "row"), *q = b.CreatePHI(i64, 3, "q"),
          *pendingRow = b.CreatePHI(i64, 3, "partial.row");
  for (PHINode *phi : {done, row, q, pendingRow})
    phi->addIncoming(b.getInt64(0), entry);
  BasicBlock *latch = BasicBlock::Create(ctx, "latch", fn);
  PHINode *latchDone, *latchRow, *latchQ, *latchPending;
  {
    IRBuilder<> lb(latch);
    latchDone = lb.CreatePHI(i64, 2), latchRow = lb.CreatePHI(i64, 2), latchQ = lb.CreatePHI(i64, 2),
    latchPending = lb.CreatePHI(i64, 2);
  }
  Value *rowsDone = b.CreateSelect(b.CreateICmpEQ(fullPerRow, b.getInt64(0)), rows, row);
  b.CreateCondBr(b.CreateAnd(anyPartial, b.CreateICmpSLT(pendingRow, rowsDone)), partial, fullBlocks);

  // One block: a full one (fewer than a pass left) or a row's partial one.
  b.SetInsertPoint(oneFull);
  b.CreateBr(one);
  b.SetInsertPoint(partial);
  b.CreateBr(one);
  b.SetInsertPoint(one);
  PHINode *oneRow = b.CreatePHI(i64, 2, "one.row"), *oneQ = b.CreatePHI(i64, 2, "one.q"),
          *left = b.CreatePHI(i64, 2, "one.periods");
  oneRow->addIncoming(row, oneFull);
  oneQ->addIncoming(q, oneFull);
  left->addIncoming(b.getInt64(lanes), oneFull);
  oneRow->addIncoming(pendingRow, partial);
  oneQ->addIncoming(fullEnd, partial);
  left->addIncoming(partialPeriods, partial);
  Value *isFull = b.CreateICmpSGE(left, b.getInt64(lanes), "full");
  std::vector<Value *> directIn = arraysAt(oneRow, oneQ, 0, inputs), directOut = arraysAt(oneRow, oneQ, 2, outputs);
  b.CreateCondBr(isFull, body, tailIn);

  // Vector v of a block holds its elements v*lanes .. v*lanes + lanes-1:
  // which are live in the partial block (made where used, off the main path).
  auto liveMasks = [&] {
    std::vector<Value *> live(P);
    Value *liveElems = b.CreateVectorSplat(lanes, b.CreateMul(left, b.getInt64(P)));
    for (unsigned v = 0; v < P; ++v)
      live[v] = b.CreateICmpSLT(b.CreateAdd(iota, b.CreateVectorSplat(lanes, b.getInt64(uint64_t(v) * lanes))),
                                liveElems);
    return live;
  };
  b.SetInsertPoint(tailIn);
  std::vector<Value *> elemLive = liveMasks();
  for (unsigned a = 0; a < inputs; ++a)
    for (unsigned v = 0; v < P; ++v)
      b.CreateAlignedStore(
          b.CreateMaskedLoad(vt, vectorIn(directIn[a], v), align, elemLive[v], Constant::getNullValue(vt)),
          vectorIn(buffers[a], v), align);
  b.CreateBr(body);

  b.SetInsertPoint(body);
  auto pick = [&](Value *direct, Value *buffer) {
    PHINode *phi = b.CreatePHI(ptr, 2);
    phi->addIncoming(direct, one);
    phi->addIncoming(buffer, tailIn);
    return phi;
  };
  Block single{{}, {}, oneQ};
  for (unsigned a = 0; a < inputs; ++a)
    single.in.push_back(pick(directIn[a], buffers[a]));
  for (unsigned k = 0; k < outputs; ++k)
    single.out.push_back(pick(directOut[k], buffers[inputs + k]));
  std::vector<unsigned> slotOrder(P);
  for (unsigned s = 0; s < P; ++s)
    slotOrder[s] = s;
  TapeCost cost;
  cost.slotCalls.resize(P);
  if (llvm::Error e = emitBlocks({single}, slotOrder, &cost))
    return e;
  b.CreateCondBr(isFull, oneDone, tailOut);

  b.SetInsertPoint(tailOut);
  elemLive = liveMasks();
  for (unsigned k = 0; k < outputs; ++k)
    for (unsigned v = 0; v < P; ++v)
      b.CreateMaskedStore(b.CreateAlignedLoad(vt, vectorIn(buffers[inputs + k], v), align),
                          vectorIn(directOut[k], v), align, elemLive[v]);
  b.CreateBr(oneDone);

  b.SetInsertPoint(oneDone);
  {
    auto [nextRow, nextQ] = advance(row, q);
    latchDone->addIncoming(b.CreateAdd(done, b.CreateZExt(isFull, i64)), oneDone);
    latchRow->addIncoming(b.CreateSelect(isFull, nextRow, row), oneDone);
    latchQ->addIncoming(b.CreateSelect(isFull, nextQ, q), oneDone);
    latchPending->addIncoming(b.CreateAdd(pendingRow, b.CreateZExt(b.CreateNot(isFull), i64)), oneDone);
    b.CreateBr(latch);
  }
  // On Zen 4, as many blocks a pass as pays (RowShape): interleaving
  // lets the inline chains of one block run beside another's, but every
  // vector live across a vector math call is spilled, and a pass holds each
  // block's. More blocks a pass measured faster where a block's tapes are
  // long between few calls (W1's f32 forward), no better where calls are
  // dense (its f64 one, where exp and erfc are calls too), and much slower
  // where many calls meet many slots (the row kernel tests' 16 slots):
  // hence longChains and fewSpills (the DEVLOG has the runs).
  const bool longChains = cost.instructions >= kInstructionsPerCall * (cost.calls + 1);
  const bool fewSpills = cost.calls * P <= kMaxCallsTimesSlots;
  const unsigned perPass = longChains && fewSpills ? o.rowShape.blocksPerPass : 1;
  b.SetInsertPoint(fullBlocks);
  Value *fullLeft = b.CreateSub(totalFull, done);
  if (perPass == 1) {
    b.CreateCondBr(b.CreateICmpSGT(fullLeft, b.getInt64(0)), oneFull, exit);
    pass->eraseFromParent();
  } else {
    BasicBlock *someFull = BasicBlock::Create(ctx, "some.full", fn);
    b.CreateCondBr(b.CreateICmpSGE(fullLeft, b.getInt64(perPass)), pass, someFull);
    b.SetInsertPoint(someFull);
    b.CreateCondBr(b.CreateICmpSGT(fullLeft, b.getInt64(0)), oneFull, exit);

    b.SetInsertPoint(pass);
    std::vector<Block> blocks;
    Value *at = row, *from = q;
    for (unsigned k = 0; k < perPass; ++k) {
      if (k > 0)
        std::tie(at, from) = advance(at, from);
      blocks.push_back(Block{arraysAt(at, from, 0, inputs), arraysAt(at, from, 2, outputs), from});
    }
    // The slots that call vector math first, the others after: then the
    // call-free slots share one stretch between calls, where the scheduler
    // interleaves their chains (W1 f32, in L2: a little faster than in order).
    std::stable_partition(slotOrder.begin(), slotOrder.end(), [&](unsigned s) { return cost.slotCalls[s] > 0; });
    if (llvm::Error e = emitBlocks(blocks, slotOrder))
      return e;
    auto [nextRow, nextQ] = advance(at, from);
    BasicBlock *passEnd = b.GetInsertBlock();
    latchDone->addIncoming(b.CreateAdd(done, b.getInt64(perPass)), passEnd);
    latchRow->addIncoming(nextRow, passEnd);
    latchQ->addIncoming(nextQ, passEnd);
    latchPending->addIncoming(pendingRow, passEnd);
    b.CreateBr(latch);
  }

  b.SetInsertPoint(latch);
  for (auto [phi, next] : {std::pair{done, latchDone}, {row, latchRow}, {q, latchQ}, {pendingRow, latchPending}})
    phi->addIncoming(next, latch);
  markNotVectorizable(b.CreateBr(head));

  b.SetInsertPoint(exit);
  b.CreateRetVoid();
  return llvm::Error::success();
}

} // namespace hsnn::detail
