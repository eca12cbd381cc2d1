//===- lib/CodeGen/RowKernel.cpp - Batch-major segments without transposes ===//
//
// A row kernel runs a segment of a batch-major layer in place (RowPlan.h),
// row by row along the row: `lanes` periods of P nodes at a time are P
// vector loads, shuffled into one vector per slot (lane l = period l), each
// slot's tape with its nodes' constants as one vector load each, and the
// results shuffled back into P vector stores. Every lane goes through the
// same operations as in the nodes-major kernels (same vector math
// functions, same order), so both layouts give the same bits.
//===----------------------------------------------------------------------===//
#include "Lowering.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

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

// i with its log2(P) low bits reversed (P a power of two).
unsigned bitReversed(unsigned i, unsigned P) {
  unsigned rev = 0;
  for (unsigned bit = 1, out = P >> 1; bit < P; bit <<= 1, out >>= 1)
    if (i & bit)
      rev |= out;
  return rev;
}

// Splits P vectors holding a sequence x (element e of vector e / lanes)
// into P vectors, vector s holding x[s], x[s+P], x[s+2P], ... For P a power
// of two up to `lanes`, log2(P) rounds of even/odd splits of vector pairs
// (P permutes per round, with two index vectors in all); otherwise a chain
// of shuffles per output.
std::vector<Value *> deinterleave(IRBuilder<> &b, std::vector<Value *> x, unsigned lanes) {
  const unsigned P = unsigned(x.size());
  if (P > 1 && (P & (P - 1)) == 0 && P <= lanes) {
    SmallVector<int, 32> even, odd;
    for (unsigned l = 0; l < lanes; ++l)
      even.push_back(int(2 * l)), odd.push_back(int(2 * l + 1));
    // After round k, x is 2^k subsequences (x[j::2^k] in bit-reversed order
    // of j), each P/2^k vectors long.
    for (unsigned parts = 1; parts < P; parts *= 2) {
      unsigned len = P / parts;
      std::vector<Value *> y(P);
      for (unsigned part = 0; part < parts; ++part)
        for (unsigned j = 0; j < len / 2; ++j) {
          Value *a = x[part * len + 2 * j], *c = x[part * len + 2 * j + 1];
          y[part * len + j] = b.CreateShuffleVector(a, c, even);
          y[part * len + len / 2 + j] = b.CreateShuffleVector(a, c, odd);
        }
      x = std::move(y);
    }
    std::vector<Value *> out(P);
    for (unsigned i = 0; i < P; ++i) // position i holds residue bitreverse(i)
      out[bitReversed(i, P)] = x[i];
    return out;
  }
  std::vector<Value *> out;
  for (unsigned s = 0; s < P; ++s)
    out.push_back(permuteLanes(b, x, lanes, [&](unsigned l) {
      return std::pair<unsigned, unsigned>{(l * P + s) / lanes, (l * P + s) % lanes};
    }));
  return out;
}

// The inverse: P vectors, vector s holding x[s::P], into the sequence x.
std::vector<Value *> interleave(IRBuilder<> &b, std::vector<Value *> slots, unsigned lanes) {
  const unsigned P = unsigned(slots.size());
  if (P > 1 && (P & (P - 1)) == 0 && P <= lanes) {
    std::vector<Value *> x(P);
    for (unsigned i = 0; i < P; ++i)
      x[i] = slots[bitReversed(i, P)];
    SmallVector<int, 32> lo, hi; // zip of the low and of the high halves
    for (unsigned l = 0; l < lanes / 2; ++l)
      lo.append({int(l), int(lanes + l)}), hi.append({int(lanes / 2 + l), int(lanes + lanes / 2 + l)});
    for (unsigned parts = P / 2; parts >= 1; parts /= 2) {
      unsigned len = P / parts;
      std::vector<Value *> y(P);
      for (unsigned part = 0; part < parts; ++part)
        for (unsigned j = 0; j < len / 2; ++j) {
          Value *e = x[part * len + j], *o = x[part * len + len / 2 + j];
          y[part * len + 2 * j] = b.CreateShuffleVector(e, o, lo);
          y[part * len + 2 * j + 1] = b.CreateShuffleVector(e, o, hi);
        }
      x = std::move(y);
      if (parts == 1)
        break;
    }
    return x;
  }
  std::vector<Value *> out;
  for (unsigned v = 0; v < P; ++v)
    out.push_back(permuteLanes(b, slots, lanes, [&](unsigned l) {
      unsigned e = v * lanes + l;
      return std::pair<unsigned, unsigned>{e % P, e / P};
    }));
  return out;
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
  // Slot s, lane l is the block's element l*P + s. A backward kernel's err
  // is not shuffled: f'(z) is, back into element order, and multiplied
  // there (the same product per element, a third fewer permutes).
  const bool backward = r.kind == KernelKind::Backward;
  std::vector<std::vector<Value *>> in(inputs);
  for (unsigned a = 0; a < (backward ? 1 : inputs); ++a) {
    std::vector<Value *> loaded(P);
    for (unsigned v = 0; v < P; ++v)
      loaded[v] = b.CreateAlignedLoad(vt, vectorIn(inAt[a], v), align);
    in[a] = deinterleave(b, std::move(loaded), lanes);
  }
  // Per output array (2: out0, 3: out1), per slot, its vector.
  std::vector<Value *> outs[2];
  for (unsigned s = 0; s < P; ++s) {
    std::vector<Value *> slot;
    // The table has `lanes` elements of padding: the last block's loads
    // stay inside it, and dead lanes are never stored.
    lowering.constants(b, *r.rowSlots[s], nullptr, vt, slot, [&](unsigned j) -> Value * {
      Value *at = b.CreateAdd(b.CreateMul(b.getInt64(constantRows[s] + j), stride), q0);
      return b.CreateAlignedLoad(vt, b.CreateInBoundsGEP(et, table, at), align);
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
    std::vector<Value *> x = interleave(b, std::move(outs[k]), lanes);
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
