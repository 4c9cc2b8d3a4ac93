// trainer — quantization-aware training of a two-layer network with the
// straight-through estimator, over libNVFP4's public C API.
//
//   x [B, D] -> linear(W1 [H, D], b1) -> ReLU -> linear(W2 [O, H], b2) -> y [B, O]
//
// fp32 master weights; each step quantizes them to NVFP4 (NVFP4_quantize),
// runs the forward products with the 4-bit weights (NVFP4_linear, i.e.
// x . fakequant(W)^T) and takes the gradients from NVFP4_linear_backward
// (grad_x through dequant(W); grad_W = grad_y^T . x applied to the fp32
// master weight: the straight-through estimator). `--precision fp32` trains
// the same network in plain fp32 for comparison.
//
// Modes: classify (softmax cross-entropy on Gaussian clusters) and regress
// (mean squared error against a random teacher network).
//
//   trainer [--mode classify|regress] [--precision nvfp4|fp32] [--steps N]
//           [--batch B] [--lr LR] [--dim D] [--hidden H] [--classes C]
//           [--seed S] [--check]
//
// --check trains both precisions and exits 1 unless the loss falls, the
// result beats chance (classify) / the mean predictor (regress) by a wide
// margin, and NVFP4 lands within a few points of fp32.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "nvfp4/nvfp4.h"

namespace {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void q4(int32_t st, const char* what) {
  if (st != Q4_OK) throw Error(std::string(what) + ": " + Q4_status_string(st) + ": " + Q4_last_error());
}

struct Options {
  std::string mode = "classify", precision = "nvfp4";
  int64_t steps = 600, batch = 64, dim = 32, hidden = 64, classes = 8, train = 4096, test = 2048;
  float lr = 0.1f;
  uint64_t seed = 1;
  bool check = false;
};

DLTensor view(const void* p, const int64_t* shape, int32_t ndim, DLDataType dt) {
  DLTensor t{};
  t.data = const_cast<void*>(p);
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = const_cast<int64_t*>(shape);
  return t;
}
const DLDataType kF32{kDLFloat, 32, 1}, kU8{kDLUInt, 8, 1};

void require_finite(const std::vector<float>& v, const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) throw Error(what + " is not finite at index " + std::to_string(i));
}

struct Dataset {
  std::vector<float> x, y;  // x [n, d]; y: class ids (classify) or targets [n, o]
  int64_t n = 0;
};

// One linear layer: fp32 master weight [n, k] and bias [n], plus its NVFP4
// form for the current step.
struct Layer {
  int64_t n, k;
  std::vector<float> w, b, gw, gb;
  std::vector<uint8_t> q, s;
  float g = 0.0f;
  Layer(int64_t n_, int64_t k_, std::mt19937_64& rng) : n(n_), k(k_) {
    if (n < 1 || k < 16 || k % 16 != 0)
      throw Error("layer [" + std::to_string(n) + ", " + std::to_string(k) +
                  "]: in_features must be a positive multiple of 16 (NVFP4 blocks)");
    std::normal_distribution<float> nd(0.0f, std::sqrt(2.0f / static_cast<float>(k)));
    w.resize(static_cast<size_t>(n * k));
    for (auto& v : w) v = nd(rng);
    b.assign(static_cast<size_t>(n), 0.0f);
    q.resize(static_cast<size_t>(n * k / 2));
    s.resize(static_cast<size_t>(n * k / 16));
  }
  void quantize() {
    const int64_t ws[2] = {n, k}, qs[1] = {n * k / 2}, ss[1] = {n * k / 16};
    DLTensor wt = view(w.data(), ws, 2, kF32), qt = view(q.data(), qs, 1, kU8),
             st = view(s.data(), ss, 1, kU8);
    q4(NVFP4_quantize(&wt, &qt, &st, Q4_SCALE_LINEAR, 0.0f, &g, nullptr), "NVFP4_quantize");
  }
  // y [m, n] = x [m, k] . W^T + b
  void forward(const float* x, int64_t m, float* y, bool nvfp4) const {
    if (nvfp4) {
      const int64_t xs[2] = {m, k}, ys[2] = {m, n}, qs[1] = {n * k / 2}, ss[1] = {n * k / 16}, bs[1] = {n};
      DLTensor xt = view(x, xs, 2, kF32), yt = view(y, ys, 2, kF32), qt = view(q.data(), qs, 1, kU8),
               st = view(s.data(), ss, 1, kU8), bt = view(b.data(), bs, 1, kF32);
      q4(NVFP4_linear(&xt, &qt, &st, Q4_SCALE_LINEAR, g, &bt, &yt, nullptr), "NVFP4_linear");
      return;
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float acc = b[static_cast<size_t>(j)];
        for (int64_t t = 0; t < k; ++t) acc += x[i * k + t] * w[static_cast<size_t>(j * k + t)];
        y[i * n + j] = acc;
      }
  }
  // gw = gy^T . x, gb = column sums of gy; gx = gy . W (quantized W for nvfp4).
  void backward(const float* gy, const float* x, int64_t m, float* gx, bool nvfp4) {
    gw.assign(static_cast<size_t>(n * k), 0.0f);
    gb.assign(static_cast<size_t>(n), 0.0f);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) gb[static_cast<size_t>(j)] += gy[i * n + j];
    if (nvfp4) {
      const int64_t gys[2] = {m, n}, xs[2] = {m, k}, qs[1] = {n * k / 2}, ss[1] = {n * k / 16},
                    gws[2] = {n, k};
      DLTensor gyt = view(gy, gys, 2, kF32), xt = view(x, xs, 2, kF32), qt = view(q.data(), qs, 1, kU8),
               st = view(s.data(), ss, 1, kU8), gwt = view(gw.data(), gws, 2, kF32),
               gxt = view(gx, xs, 2, kF32);
      q4(NVFP4_linear_backward(&gyt, &xt, &qt, &st, Q4_SCALE_LINEAR, g, gx ? &gxt : nullptr, &gwt, nullptr),
         "NVFP4_linear_backward");
      return;
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float d = gy[i * n + j];
        for (int64_t t = 0; t < k; ++t) gw[static_cast<size_t>(j * k + t)] += d * x[i * k + t];
      }
    if (gx)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t t = 0; t < k; ++t) {
          float acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += gy[i * n + j] * w[static_cast<size_t>(j * k + t)];
          gx[i * k + t] = acc;
        }
  }
  void step(float lr) {
    require_finite(gw, "weight gradient");
    for (size_t i = 0; i < w.size(); ++i) w[i] -= lr * gw[i];
    for (size_t i = 0; i < b.size(); ++i) b[i] -= lr * gb[i];
    require_finite(w, "updated weight (learning rate too large?)");
  }
};

struct Result {
  double first_loss = 0, last_loss = 0, metric = 0;  // metric: accuracy or R^2 on the test set
};

class Task {
 public:
  explicit Task(const Options& o) : o_(o), out_(o.mode == "classify" ? o.classes : 4) {
    if (o.mode != "classify" && o.mode != "regress") throw Error("--mode must be classify or regress");
    if (o.dim < 16 || o.dim % 16 != 0 || o.hidden < 16 || o.hidden % 16 != 0)
      throw Error(
          "--dim and --hidden must be positive multiples of 16 (NVFP4 blocks of the linears' inputs)");
    if (o.mode == "classify" && o.classes < 2) throw Error("--classes must be >= 2");
    if (o.batch < 1 || o.steps < 1) throw Error("--batch and --steps must be >= 1");
    if (!(o.lr > 0.0f) || !std::isfinite(o.lr)) throw Error("--lr must be a finite positive number");
    std::mt19937_64 rng(o.seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    if (o.mode == "classify") {
      centers_.resize(static_cast<size_t>(o.classes * o.dim));
      for (auto& v : centers_) v = 0.6f * nd(rng);
    } else {
      t1_.resize(static_cast<size_t>(32 * o.dim));
      t2_.resize(static_cast<size_t>(out_ * 32));
      for (auto& v : t1_) v = nd(rng) / std::sqrt(static_cast<float>(o.dim));
      for (auto& v : t2_) v = nd(rng) / std::sqrt(32.0f);
    }
    train_ = make(o.train, rng);
    test_ = make(o.test, rng);
  }

  Result run(bool nvfp4) const {
    std::mt19937_64 rng(o_.seed + 17);
    Layer l1(o_.hidden, o_.dim, rng), l2(out_, o_.hidden, rng);
    Result r;
    const int64_t B = o_.batch, D = o_.dim, Hd = o_.hidden, O = out_;
    std::vector<float> x(static_cast<size_t>(B * D)), h(static_cast<size_t>(B * Hd)),
        y(static_cast<size_t>(B * O)), gy(static_cast<size_t>(B * O)), gh(static_cast<size_t>(B * Hd));
    std::vector<int64_t> order(static_cast<size_t>(train_.n));
    std::iota(order.begin(), order.end(), 0);
    int64_t cursor = train_.n;
    double window = 0;
    int64_t wn = 0;
    for (int64_t step = 0; step < o_.steps; ++step) {
      std::vector<int64_t> idx(static_cast<size_t>(B));
      for (auto& i : idx) {
        if (cursor == train_.n) {
          std::shuffle(order.begin(), order.end(), rng);
          cursor = 0;
        }
        i = order[static_cast<size_t>(cursor++)];
      }
      for (int64_t i = 0; i < B; ++i)
        std::copy_n(train_.x.begin() + idx[static_cast<size_t>(i)] * D, D, x.begin() + i * D);
      if (nvfp4) {
        l1.quantize();
        l2.quantize();
      }
      l1.forward(x.data(), B, h.data(), nvfp4);
      for (auto& v : h) v = std::max(v, 0.0f);
      l2.forward(h.data(), B, y.data(), nvfp4);
      const double loss = loss_and_grad(y, train_, idx, gy);
      if (!std::isfinite(loss))
        throw Error("step " + std::to_string(step) + ": loss is not finite (learning rate too large?)");
      window += loss;
      if (++wn == 25 || step + 1 == o_.steps) {
        if (r.first_loss == 0) r.first_loss = window / static_cast<double>(wn);
        r.last_loss = window / static_cast<double>(wn);
        window = 0;
        wn = 0;
      }
      l2.backward(gy.data(), h.data(), B, gh.data(), nvfp4);
      for (size_t i = 0; i < gh.size(); ++i)
        if (h[i] <= 0.0f) gh[i] = 0.0f;
      l1.backward(gh.data(), x.data(), B, nullptr, nvfp4);
      l1.step(o_.lr);
      l2.step(o_.lr);
    }
    if (nvfp4) {
      l1.quantize();
      l2.quantize();
    }
    r.metric = evaluate(l1, l2, nvfp4);
    return r;
  }

  const Options& options() const { return o_; }

 private:
  Dataset make(int64_t n, std::mt19937_64& rng) const {
    Dataset d;
    d.n = n;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_int_distribution<int64_t> cls(0, o_.classes - 1);
    d.x.resize(static_cast<size_t>(n * o_.dim));
    if (o_.mode == "classify") {
      d.y.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t c = cls(rng);
        d.y[static_cast<size_t>(i)] = static_cast<float>(c);
        for (int64_t j = 0; j < o_.dim; ++j)
          d.x[static_cast<size_t>(i * o_.dim + j)] = centers_[static_cast<size_t>(c * o_.dim + j)] + nd(rng);
      }
    } else {
      d.y.resize(static_cast<size_t>(n * out_));
      std::vector<float> hid(32);
      for (int64_t i = 0; i < n; ++i) {
        float* xi = d.x.data() + i * o_.dim;
        for (int64_t j = 0; j < o_.dim; ++j) xi[j] = nd(rng);
        for (int64_t u = 0; u < 32; ++u) {
          float a = 0;
          for (int64_t j = 0; j < o_.dim; ++j) a += t1_[static_cast<size_t>(u * o_.dim + j)] * xi[j];
          hid[static_cast<size_t>(u)] = std::tanh(a);
        }
        for (int64_t v = 0; v < out_; ++v) {
          float a = 0.05f * nd(rng);
          for (int64_t u = 0; u < 32; ++u)
            a += t2_[static_cast<size_t>(v * 32 + u)] * hid[static_cast<size_t>(u)];
          d.y[static_cast<size_t>(i * out_ + v)] = a;
        }
      }
    }
    require_finite(d.x, "generated inputs");
    require_finite(d.y, "generated targets");
    return d;
  }

  // Mean loss over the batch and its gradient w.r.t. the outputs.
  double loss_and_grad(const std::vector<float>& y, const Dataset& d, const std::vector<int64_t>& idx,
                       std::vector<float>& gy) const {
    const int64_t B = static_cast<int64_t>(idx.size()), O = out_;
    double loss = 0;
    for (int64_t i = 0; i < B; ++i) {
      const float* yi = y.data() + i * O;
      float* gi = gy.data() + i * O;
      const int64_t row = idx[static_cast<size_t>(i)];
      if (o_.mode == "classify") {
        const int64_t label = static_cast<int64_t>(d.y[static_cast<size_t>(row)]);
        const float mx = *std::max_element(yi, yi + O);
        double sum = 0;
        for (int64_t c = 0; c < O; ++c) sum += std::exp(static_cast<double>(yi[c] - mx));
        for (int64_t c = 0; c < O; ++c) {
          const double p = std::exp(static_cast<double>(yi[c] - mx)) / sum;
          gi[c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) / static_cast<double>(B));
        }
        loss += -(static_cast<double>(yi[label] - mx) - std::log(sum));
      } else {
        for (int64_t c = 0; c < O; ++c) {
          const double e = static_cast<double>(yi[c]) - d.y[static_cast<size_t>(row * O + c)];
          loss += e * e / static_cast<double>(O);
          gi[c] = static_cast<float>(2.0 * e / static_cast<double>(O * B));
        }
      }
    }
    return loss / static_cast<double>(B);
  }

  // Test accuracy (classify) or R^2 (regress), with the trained weights in
  // the precision they were trained for.
  double evaluate(const Layer& l1, const Layer& l2, bool nvfp4) const {
    const int64_t n = test_.n, O = out_;
    std::vector<float> h(static_cast<size_t>(n * o_.hidden)), y(static_cast<size_t>(n * O));
    l1.forward(test_.x.data(), n, h.data(), nvfp4);
    for (auto& v : h) v = std::max(v, 0.0f);
    l2.forward(h.data(), n, y.data(), nvfp4);
    require_finite(y, "test outputs");
    if (o_.mode == "classify") {
      int64_t ok = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float* yi = y.data() + i * O;
        ok += (std::max_element(yi, yi + O) - yi) == static_cast<int64_t>(test_.y[static_cast<size_t>(i)])
                  ? 1
                  : 0;
      }
      return static_cast<double>(ok) / static_cast<double>(n);
    }
    double se = 0, var = 0;
    for (int64_t c = 0; c < O; ++c) {
      double mean = 0;
      for (int64_t i = 0; i < n; ++i) mean += test_.y[static_cast<size_t>(i * O + c)];
      mean /= static_cast<double>(n);
      for (int64_t i = 0; i < n; ++i) {
        const double t = test_.y[static_cast<size_t>(i * O + c)];
        se += (y[static_cast<size_t>(i * O + c)] - t) * (y[static_cast<size_t>(i * O + c)] - t);
        var += (t - mean) * (t - mean);
      }
    }
    return 1.0 - se / var;
  }

  Options o_;
  int64_t out_;
  std::vector<float> centers_, t1_, t2_;
  Dataset train_, test_;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(f + " needs a value");
      return argv[++i];
    };
    auto num = [&]() -> int64_t {
      const std::string v = val();
      char* end = nullptr;
      const long long r = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end) throw Error(f + ": expected an integer, got '" + v + "'");
      return r;
    };
    if (f == "--mode")
      o.mode = val();
    else if (f == "--precision")
      o.precision = val();
    else if (f == "--steps")
      o.steps = num();
    else if (f == "--batch")
      o.batch = num();
    else if (f == "--dim")
      o.dim = num();
    else if (f == "--hidden")
      o.hidden = num();
    else if (f == "--classes")
      o.classes = num();
    else if (f == "--seed")
      o.seed = static_cast<uint64_t>(num());
    else if (f == "--lr") {
      const std::string v = val();
      char* end = nullptr;
      o.lr = std::strtof(v.c_str(), &end);
      if (v.empty() || *end) throw Error("--lr: expected a number, got '" + v + "'");
    } else if (f == "--check")
      o.check = true;
    else if (f == "--help" || f == "-h") {
      std::printf(
          "usage: trainer [--mode classify|regress] [--precision nvfp4|fp32] [--steps N] [--batch B] [--lr "
          "LR]\n"
          "               [--dim D] [--hidden H] [--classes C] [--seed S] [--check]\n");
      std::exit(0);
    } else
      throw Error("unknown option " + f);
  }
  if (o.precision != "nvfp4" && o.precision != "fp32") throw Error("--precision must be nvfp4 or fp32");
  return o;
}

void report(const char* name, const Options& o, const Result& r) {
  std::printf("%-5s %s: loss %.4f -> %.4f, test %s %.2f%s\n", name, o.mode.c_str(), r.first_loss, r.last_loss,
              o.mode == "classify" ? "accuracy" : "R^2", o.mode == "classify" ? 100.0 * r.metric : r.metric,
              o.mode == "classify" ? " %" : "");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const Task task(o);
    if (!o.check) {
      const Result r = task.run(o.precision == "nvfp4");
      report(o.precision.c_str(), o, r);
      return 0;
    }
    const Result q = task.run(true), f = task.run(false);
    report("nvfp4", o, q);
    report("fp32", o, f);
    bool ok = true;
    auto need = [&](bool c, const std::string& what) {
      if (!c) std::fprintf(stderr, "trainer: check failed: %s\n", what.c_str());
      ok = ok && c;
    };
    need(q.last_loss < 0.5 * q.first_loss, "the NVFP4 training loss at least halves");
    if (o.mode == "classify") {
      const double chance = 1.0 / static_cast<double>(o.classes);
      need(q.metric > chance + 0.4, "NVFP4 accuracy beats chance by more than 40 points");
      need(q.metric > f.metric - 0.05, "NVFP4 accuracy within 5 points of fp32");
    } else {
      need(q.metric > 0.6, "NVFP4 R^2 above 0.6");
      need(q.metric > f.metric - 0.1, "NVFP4 R^2 within 0.1 of fp32");
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: error: %s\n", e.what());
    return 1;
  }
}
