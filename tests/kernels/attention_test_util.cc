#include "attention_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "common/fp8.h"
#include "kernels/kernels.h"

namespace kvtier::kernels::testing {
namespace {

float Widen(DType dtype, uint16_t bits) {
  return dtype == DType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
}

uint16_t Narrow(DType dtype, float value) {
  return dtype == DType::kFloat16 ? FloatToHalf(value) : FloatToBFloat16(value);
}

// Written independently of kernels/internal/chunks.h on purpose.
int64_t FirstAttended(int64_t len, uint32_t window) {
  return window > 0 && len > static_cast<int64_t>(window) ? len - window : 0;
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string AttentionShape::ToString() const {
  std::ostringstream os;
  os << DTypeName(dtype) << " head_dim=" << head_dim << " kv_heads=" << kv_heads
     << " group=" << group << " layer=" << layer << "/" << layers
     << " block_tokens=" << block_tokens << " window=" << window << " chunk_tokens=" << chunk_tokens
     << " scale=" << softmax_scale << " q_range=" << q_range << " seq_lens={";
  for (int32_t len : seq_lens) os << len << ",";
  os << "}";
  return os.str();
}

uint16_t NanBits(DType dtype) { return dtype == DType::kFloat16 ? 0x7e5a : 0x7fda; }

Layout AttentionData::layout() const {
  return Layout{shape_.layers, shape_.kv_heads, shape_.head_dim, shape_.dtype, shape_.block_tokens};
}

AttentionData::AttentionData(const AttentionShape& s, uint64_t seed) : shape_(s) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const uint64_t bt = s.block_tokens;
  const uint64_t batch = s.seq_lens.size();
  const uint16_t nan = NanBits(s.dtype);

  uint64_t used = 0;
  uint64_t longest_blocks = 0;
  for (int32_t len : s.seq_lens) {
    used += CeilDiv(static_cast<uint64_t>(len), bt);
    longest_blocks = std::max(longest_blocks, CeilDiv(static_cast<uint64_t>(len), bt));
  }
  max_blocks_ = static_cast<uint32_t>(std::max<uint64_t>(1, longest_blocks + s.extra_table_blocks));
  num_slots_ = static_cast<uint32_t>(used + std::max(1u, s.spare_slots));
  // Slack between slots, NaN too: the stride is not the block size.
  slot_stride_ = layout().BlockBytes() + 32;
  arena.assign(num_slots_ * slot_stride_ / 2, nan);

  // Slots in random order; spare ones (never owned) stay NaN and fill the
  // unused table entries, so reading one poisons the output.
  std::vector<int32_t> perm(num_slots_);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::vector<int32_t> spare(perm.begin() + static_cast<int64_t>(used), perm.end());
  table.assign(batch * max_blocks_, 0);
  size_t next = 0;
  for (uint64_t b = 0; b < batch; ++b) {
    const uint64_t owned = CeilDiv(static_cast<uint64_t>(s.seq_lens[b]), bt);
    for (uint64_t j = 0; j < max_blocks_; ++j) {
      table[b * max_blocks_ + j] = j < owned ? perm[next++] : spare[rng() % spare.size()];
    }
  }
  seq_lens = s.seq_lens;

  // Only `layer`'s K and V of attended tokens get values.
  const uint64_t token_stride = static_cast<uint64_t>(s.kv_heads) * s.head_dim;
  for (uint64_t b = 0; b < batch; ++b) {
    const int64_t len = s.seq_lens[b];
    for (int64_t t = FirstAttended(len, s.window); t < len; ++t) {
      const auto ut = static_cast<uint64_t>(t);
      const auto slot = static_cast<uint64_t>(table[b * max_blocks_ + ut / bt]);
      for (uint64_t kv = 0; kv < 2; ++kv) {
        const uint64_t row =
            slot * slot_stride_ / 2 + ((s.layer * 2ULL + kv) * bt + ut % bt) * token_stride;
        for (uint64_t e = 0; e < token_stride; ++e) arena[row + e] = Narrow(s.dtype, unit(rng));
      }
    }
  }
  std::uniform_real_distribution<float> q_dist(-s.q_range, s.q_range);
  q.resize(batch * num_q_heads() * s.head_dim);
  for (uint16_t& x : q) x = Narrow(s.dtype, q_dist(rng));
  o.assign(q.size(), nan);
}

DecodeAttentionParams AttentionData::Params() const {
  DecodeAttentionParams p;
  p.layout = layout();
  p.layer = shape_.layer;
  p.batch = static_cast<uint32_t>(seq_lens.size());
  p.num_q_heads = num_q_heads();
  p.max_blocks_per_seq = max_blocks_;
  p.num_slots = num_slots_;
  p.slot_stride_bytes = slot_stride_;
  p.softmax_scale = shape_.softmax_scale;
  p.window = shape_.window;
  p.chunk_tokens = shape_.chunk_tokens;
  p.q = q.data();
  p.o = const_cast<uint16_t*>(o.data());  // the test owns o; Params() is a view
  p.arena = arena.data();
  p.block_table = table.data();
  p.seq_lens = seq_lens.data();
  return p;
}

std::vector<double> NaiveAttention(const AttentionData& data) {
  const AttentionShape& s = data.shape();
  const uint64_t d_n = s.head_dim;
  const uint64_t bt = s.block_tokens;
  const uint64_t token_stride = s.kv_heads * d_n;
  const double scale = s.softmax_scale != 0 ? s.softmax_scale : 1.0 / std::sqrt(double(d_n));
  const uint64_t hq = data.num_q_heads();
  std::vector<double> out(data.q.size(), 0.0);
  auto element = [&](uint64_t b, int64_t t, uint64_t kv, uint64_t h, uint64_t d) {
    const auto ut = static_cast<uint64_t>(t);
    const auto slot = static_cast<uint64_t>(data.table[b * data.max_blocks_per_seq() + ut / bt]);
    const uint64_t i = slot * data.slot_stride_bytes() / 2 +
                       ((s.layer * 2ULL + kv) * bt + ut % bt) * token_stride + h * d_n + d;
    return static_cast<double>(Widen(s.dtype, data.arena[i]));
  };
  for (uint64_t b = 0; b < s.seq_lens.size(); ++b) {
    const int64_t len = s.seq_lens[b];
    const int64_t lo = FirstAttended(len, s.window);
    for (uint64_t qh = 0; qh < hq; ++qh) {
      const uint64_t h = qh / s.group;
      const uint16_t* q = data.q.data() + (b * hq + qh) * d_n;
      std::vector<double> scores;
      for (int64_t t = lo; t < len; ++t) {
        double dot = 0;
        for (uint64_t d = 0; d < d_n; ++d) dot += Widen(s.dtype, q[d]) * element(b, t, 0, h, d);
        scores.push_back(scale * dot);
      }
      if (scores.empty()) continue;  // empty sequence: zeros
      const double max = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (double& x : scores) sum += (x = std::exp(x - max));
      for (uint64_t d = 0; d < d_n; ++d) {
        double acc = 0;
        for (int64_t t = lo; t < len; ++t) {
          acc += scores[static_cast<uint64_t>(t - lo)] * element(b, t, 1, h, d);
        }
        out[(b * hq + qh) * d_n + d] = acc / sum;
      }
    }
  }
  return out;
}

Tolerance ReferenceTolerance(DType dtype) {
  return dtype == DType::kFloat16 ? Tolerance{2e-5, 0x1p-10} : Tolerance{2e-5, 0x1p-7};
}

Tolerance GpuTolerance(DType dtype) {
  return dtype == DType::kFloat16 ? Tolerance{2e-5, 0x1p-9} : Tolerance{2e-5, 0x1p-6};
}

std::string CompareOutputs(DType dtype, const std::vector<uint16_t>& got,
                           const std::vector<double>& want, Tolerance tol) {
  std::ostringstream os;
  int failures = 0;
  if (got.size() != want.size()) return "size mismatch";
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = Widen(dtype, got[i]);
    const double limit = tol.atol + tol.rtol * std::abs(want[i]);
    if (!(std::abs(g - want[i]) <= limit)) {  // NaN fails too
      if (++failures <= 5) {
        os << "  [" << i << "] got " << g << " want " << want[i] << " (diff "
           << std::abs(g - want[i]) << " > " << limit << ")\n";
      }
    }
  }
  if (failures > 0) os << failures << " of " << got.size() << " elements out of tolerance\n";
  return os.str();
}

std::string CompareOutputs(DType dtype, const std::vector<uint16_t>& got,
                           const std::vector<uint16_t>& want, Tolerance tol) {
  std::vector<double> wide(want.size());
  for (size_t i = 0; i < want.size(); ++i) wide[i] = Widen(dtype, want[i]);
  return CompareOutputs(dtype, got, wide, tol);
}

std::vector<AttentionShape> SweepShapes(DType dtype, uint32_t head_dim, uint32_t group) {
  AttentionShape base;
  base.dtype = dtype;
  base.head_dim = head_dim;
  base.group = group;
  const int32_t bt = static_cast<int32_t>(base.block_tokens);
  base.seq_lens = {1, bt - 1, bt, bt + 1, 5 * bt + 3};
  std::vector<AttentionShape> shapes;
  auto add = [&](auto&& edit) {
    AttentionShape s = base;
    edit(s);
    shapes.push_back(s);
  };
  add([](AttentionShape&) {});                                       // no split
  add([&](AttentionShape& s) { s.chunk_tokens = s.block_tokens; });  // split on blocks
  add([](AttentionShape& s) { s.chunk_tokens = 7; });                // split mid-block
  add([](AttentionShape& s) { s.window = 20; });
  add([](AttentionShape& s) {
    s.window = 20;
    s.chunk_tokens = 6;
  });
  add([](AttentionShape& s) { s.window = 1; });
  add([](AttentionShape& s) {  // one long sequence: the automatic split cuts it
    s.seq_lens = {300};
    s.kv_heads = 1;  // MQA when group > 1
    s.layer = 2;
  });
  add([](AttentionShape& s) {  // an empty sequence among others
    s.seq_lens = {0, 40, 1};
    s.chunk_tokens = 16;
    s.layer = 0;
  });
  add([](AttentionShape& s) {  // scores in the hundreds: max subtraction matters
    s.seq_lens = {50, 33};
    s.q_range = 100.0f;
    s.chunk_tokens = 16;
  });
  add([](AttentionShape& s) {
    s.seq_lens = {70, 2};
    s.softmax_scale = 0.05f;
    s.kv_heads = 3;
    s.chunk_tokens = 32;
  });
  return shapes;
}

std::string SweepName(const ::testing::TestParamInfo<SweepParam>& param) {
  return std::string(DTypeName(std::get<0>(param.param))) + "_d" +
         std::to_string(std::get<1>(param.param)) + "_g" + std::to_string(std::get<2>(param.param));
}

std::vector<uint16_t> RunReference(AttentionData data) {
  const DecodeAttentionParams p = data.Params();
  auto plan = PlanDecodeAttention(p);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  std::vector<float> workspace(plan->workspace_bytes / sizeof(float),
                               std::numeric_limits<float>::quiet_NaN());
  const Status s = DecodeAttentionReference(p, workspace.data(), plan->workspace_bytes);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return data.o;
}

std::string Fp8Case::ToString() const {
  return std::string(DTypeName(io)) + "->" + std::string(DTypeName(fp8)) + " d" +
         std::to_string(head_dim) + " g" + std::to_string(group) +
         (window != 0 ? " window " + std::to_string(window) : "") +
         (chunk_tokens != 0 ? " chunk " + std::to_string(chunk_tokens) : "");
}

Fp8AttentionData::Fp8AttentionData(const Fp8Case& c, uint32_t seed) : c_(c) {
  wide_ = Layout{2, 2, c.head_dim, c.io, 16};
  const Layout narrow = Fp8LayoutOf(wide_, c.fp8);
  for (int32_t len : c.seq_lens) {
    max_blocks_ = std::max<uint32_t>(max_blocks_, static_cast<uint32_t>((len + 15) / 16));
  }
  slots_ = static_cast<uint32_t>(c.seq_lens.size()) * max_blocks_;
  wide_stride_ = (wide_.BlockBytes() + 15) / 16 * 16;
  fp8_stride_ = (narrow.BlockBytes() + 15) / 16 * 16;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> kv(-1.0f, 1.0f), qd(-2.0f, 2.0f);
  const auto narrow16 = [&](float v) { return Narrow(c.io, v); };
  wide_arena.resize(slots_ * wide_stride_);
  fp8_arena.resize(slots_ * fp8_stride_);
  for (uint32_t s = 0; s < slots_; ++s) {
    std::byte* block = wide_arena.data() + s * wide_stride_;
    for (uint64_t i = 0; i < wide_.ValueBytes() / 2; ++i) {
      const uint16_t bits = narrow16(kv(rng));
      std::memcpy(block + 2 * i, &bits, 2);
    }
    const Status st = QuantizeBlock(wide_, c.fp8, {block, wide_.BlockBytes()},
                                    {fp8_arena.data() + s * fp8_stride_, narrow.BlockBytes()});
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  table.resize(slots_);
  for (uint32_t i = 0; i < slots_; ++i) table[i] = static_cast<int32_t>((i * 7) % slots_);
  const uint64_t values = c.seq_lens.size() * 2ULL * c.group * c.head_dim;
  q.resize(values);
  for (uint16_t& x : q) x = narrow16(qd(rng));
  o_wide.assign(values, 0);
  o_fp8.assign(values, 0);
}

DecodeAttentionParams Fp8AttentionData::WideParams() {
  DecodeAttentionParams p;
  p.layout = wide_;
  p.layer = 1;
  p.batch = static_cast<uint32_t>(c_.seq_lens.size());
  p.num_q_heads = 2 * c_.group;
  p.max_blocks_per_seq = max_blocks_;
  p.num_slots = slots_;
  p.slot_stride_bytes = wide_stride_;
  p.window = c_.window;
  p.chunk_tokens = c_.chunk_tokens;
  p.q = q.data();
  p.o = o_wide.data();
  p.arena = wide_arena.data();
  p.block_table = table.data();
  p.seq_lens = c_.seq_lens.data();
  return p;
}

DecodeAttentionParams Fp8AttentionData::Fp8Params() {
  DecodeAttentionParams p = WideParams();
  p.layout = Fp8LayoutOf(wide_, c_.fp8);
  p.io_dtype = c_.io;
  p.slot_stride_bytes = fp8_stride_;
  p.arena = fp8_arena.data();
  p.o = o_fp8.data();
  return p;
}

}  // namespace kvtier::kernels::testing
