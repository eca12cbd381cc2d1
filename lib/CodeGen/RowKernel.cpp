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
#include <llvm/IR/Module.h>

#include <llvm/ADT/bit.h>

#include <algorithm>
#include <functional>

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
// independent ops): unpck/shufps 2 per cycle, vshuff32x4 1, vpermt2ps 0.8,
// next to 1 vaddps; the old plan of log2(P) vpermt2ps rounds each way
// made W1's batch-major forward 1.18x its nodes-major time, this one 1.12x
// (one thread, in one process, alternating). Bits inside a block are taken through lane bit
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

  BasicBlock *entry = BasicBlock::Create(ctx, "entry", fn), *row = BasicBlock::Create(ctx, "row", fn),
             *block = BasicBlock::Create(ctx, "periods", fn), *nextRow = BasicBlock::Create(ctx, "next.row", fn),
             *exit = BasicBlock::Create(ctx, "exit", fn);
  IRBuilder<> b(entry);
  if (o.fastMath)
    b.setFastMathFlags(FastMathFlags::getFast());
  SmallVector<Constant *, 16> iotaLanes;
  for (unsigned l = 0; l < lanes; ++l)
    iotaLanes.push_back(b.getInt64(l));
  Constant *iota = ConstantVector::get(iotaLanes);
  b.CreateCondBr(b.CreateAnd(b.CreateICmpSGT(rows, b.getInt64(0)), b.CreateICmpSGT(periods, b.getInt64(0))), row,
                 exit);

  // Row by row, along the row: sequential streams, which the hardware
  // prefetchers follow (blocks of periods down the rows, 1 KiB apart,
  // measured 3-7x slower on bench W1: every load a miss).
  b.SetInsertPoint(row);
  PHINode *ri = b.CreatePHI(i64, 2, "r");
  ri->addIncoming(b.getInt64(0), entry);
  Value *rowStart = b.CreateMul(ri, ld);
  b.CreateBr(block);

  // `lanes` periods at a time. Plain vector loads and stores (AVX-512
  // masked ones measured 3x slower on Zen 4 even with every lane set); the
  // last, partial block goes through stack buffers with masked copies.
  b.SetInsertPoint(block);
  PHINode *q0 = b.CreatePHI(i64, 2, "q0");
  q0->addIncoming(b.getInt64(0), row);
  Value *left = b.CreateSub(periods, q0);
  Value *full = b.CreateICmpSGE(left, b.getInt64(lanes), "full");
  Value *base = b.CreateAdd(rowStart, b.CreateMul(q0, b.getInt64(P)));
  auto arrayAt = [&](unsigned arg) { return b.CreateInBoundsGEP(et, fn->getArg(arg), base); };
  unsigned inputs = r.kind == KernelKind::Backward ? 2 : 1;
  unsigned outputs = r.kind == KernelKind::Fused ? 2 : 1;
  std::vector<Value *> buffers;
  {
    IRBuilder<> top(&entry->front());
    for (unsigned k = 0; k < inputs + outputs; ++k)
      buffers.push_back(top.CreateAlloca(ArrayType::get(et, uint64_t(P) * lanes), nullptr, "partial"));
  }
  BasicBlock *tailIn = BasicBlock::Create(ctx, "partial.in", fn), *body = BasicBlock::Create(ctx, "body", fn),
             *tailOut = BasicBlock::Create(ctx, "partial.out", fn), *latch = BasicBlock::Create(ctx, "next.periods", fn);
  std::vector<Value *> directIn, directOut;
  for (unsigned a = 0; a < inputs; ++a)
    directIn.push_back(arrayAt(a));
  for (unsigned k = 0; k < outputs; ++k)
    directOut.push_back(arrayAt(2 + k));
  b.CreateCondBr(full, body, tailIn);

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
  auto vectorIn = [&](Value *p, unsigned v) { return b.CreateConstInBoundsGEP1_64(et, p, uint64_t(v) * lanes); };
  for (unsigned a = 0; a < inputs; ++a)
    for (unsigned v = 0; v < P; ++v)
      b.CreateAlignedStore(
          b.CreateMaskedLoad(vt, vectorIn(directIn[a], v), align, elemLive[v], Constant::getNullValue(vt)),
          vectorIn(buffers[a], v), align);
  b.CreateBr(body);

  b.SetInsertPoint(body);
  auto pick = [&](Value *direct, Value *buffer) {
    PHINode *phi = b.CreatePHI(ptr, 2);
    phi->addIncoming(direct, block);
    phi->addIncoming(buffer, tailIn);
    return phi;
  };
  std::vector<Value *> inAt, outAt;
  for (unsigned a = 0; a < inputs; ++a)
    inAt.push_back(pick(directIn[a], buffers[a]));
  for (unsigned k = 0; k < outputs; ++k)
    outAt.push_back(pick(directOut[k], buffers[inputs + k]));
  // Slot s, lane l is the block's element lanePeriods[l]*P + s; the
  // constants table holds periods in order, so a slot's constants are
  // shuffled the same way when the lanes are not. A backward kernel's err
  // is not shuffled: f'(z) is, back into element order, and multiplied
  // there (the same product per element, a third fewer permutes).
  const std::vector<int> lanePeriods = periodOfLane(P, lanes, elemBits);
  const bool inOrder = std::is_sorted(lanePeriods.begin(), lanePeriods.end());
  const bool backward = r.kind == KernelKind::Backward;
  std::vector<std::vector<Value *>> in(inputs);
  for (unsigned a = 0; a < (backward ? 1 : inputs); ++a) {
    std::vector<Value *> loaded(P);
    for (unsigned v = 0; v < P; ++v)
      loaded[v] = b.CreateAlignedLoad(vt, vectorIn(inAt[a], v), align);
    in[a] = deinterleave(b, std::move(loaded), lanes, elemBits);
  }
  // Per output array (2: out0, 3: out1), per slot, its vector.
  std::vector<Value *> outs[2];
  for (unsigned s = 0; s < P; ++s) {
    std::vector<Value *> slot;
    // The table has `lanes` elements of padding: the last block's loads
    // stay inside it, and dead lanes are never stored.
    lowering.constants(b, *r.rowSlots[s], nullptr, vt, slot, [&](unsigned j) -> Value * {
      Value *at = b.CreateAdd(b.CreateMul(b.getInt64(constantRows[s] + j), stride), q0);
      Value *c = b.CreateAlignedLoad(vt, b.CreateInBoundsGEP(et, table, at), align);
      return inOrder ? c : b.CreateShuffleVector(c, lanePeriods);
    });
    ElementIO io{fn, nullptr, vt, 0};
    for (unsigned a = 0; a < in.size(); ++a)
      io.preloaded[a] = in[a].empty() ? nullptr : in[a][s];
    io.store = [&](Value *v, unsigned arg) { outs[arg - 2].push_back(v); };
    // A backward tape's output is f'(z): stored as a forward kernel would.
    KernelKind kind = backward ? KernelKind::Forward : r.kind;
    llvm::Expected<Value *> done = lowering.element(b, kind, *r.rowSlots[s], slot, io, nullptr);
    if (!done)
      return done.takeError();
  }
  // Stored vector v, lane l is element e = v*lanes + l: slot e % P, lane e / P.
  for (unsigned k = 0; k < outputs; ++k) {
    std::vector<Value *> x = interleave(b, std::move(outs[k]), lanes, elemBits);
    for (unsigned v = 0; v < P; ++v) {
      if (backward) // err * f'(z), as ElementLowering::element multiplies
        x[v] = b.CreateFMul(b.CreateAlignedLoad(vt, vectorIn(inAt[1], v), align), x[v]);
      b.CreateAlignedStore(x[v], vectorIn(outAt[k], v), align);
    }
  }
  b.CreateCondBr(full, latch, tailOut);

  b.SetInsertPoint(tailOut);
  elemLive = liveMasks();
  for (unsigned k = 0; k < outputs; ++k)
    for (unsigned v = 0; v < P; ++v)
      b.CreateMaskedStore(b.CreateAlignedLoad(vt, vectorIn(buffers[inputs + k], v), align),
                          vectorIn(directOut[k], v), align, elemLive[v]);
  b.CreateBr(latch);

  b.SetInsertPoint(latch);
  Value *qNext = b.CreateAdd(q0, b.getInt64(lanes), "q0.next", true, true);
  q0->addIncoming(qNext, latch);
  markNotVectorizable(b.CreateCondBr(b.CreateICmpSLT(qNext, periods), block, nextRow));

  b.SetInsertPoint(nextRow);
  Value *rNext = b.CreateAdd(ri, b.getInt64(1), "r.next", true, true);
  ri->addIncoming(rNext, nextRow);
  markNotVectorizable(b.CreateCondBr(b.CreateICmpSLT(rNext, rows), row, exit));

  b.SetInsertPoint(exit);
  b.CreateRetVoid();
  return llvm::Error::success();
}

} // namespace hsnn::detail
