// image-server's images: the synthesised test card, the filters (blur, sharpen, edges, gray, resize, rotate),
// the pipeline that a request's ops name, and the PPM encoding of the result.
//
// Part of image-server's one translation unit (image_server.h says why): image_server.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_IMAGE_SERVER_IMAGE_H
#define LLAMALLOC_WORKLOADS_IMAGE_SERVER_IMAGE_H

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "image_server.h"

namespace IMGSRV_NAMESPACE::image {

inline std::uint8_t clamp_byte(int value) { return static_cast<std::uint8_t>(std::clamp(value, 0, 255)); }

struct Image {
  int width = 0;
  int height = 0;
  int channels = 3;
  std::vector<std::uint8_t> pixels;

  Image() = default;
  Image(int w, int h, int c) : width(w), height(h), channels(c), pixels(static_cast<std::size_t>(w) * h * c) {}
  std::uint8_t* at(int x, int y) { return &pixels[(static_cast<std::size_t>(y) * width + x) * channels]; }
  const std::uint8_t* at(int x, int y) const {
    return &pixels[(static_cast<std::size_t>(y) * width + x) * channels];
  }
};

// Calls f(x, y) for every pixel of `image`, row by row.
template <typename F>
void for_each_pixel(const Image& image, F&& f) {
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) f(x, y);
  }
}

// A deterministic test card: gradients, rings and noise, so that every filter changes the bytes.
Image synthesize(int width, int height, std::uint64_t seed) {
  Image img(width, height, 3);
  const int cx = static_cast<int>(seed % static_cast<std::uint64_t>(width));
  const int cy = static_cast<int>((seed >> 16) % static_cast<std::uint64_t>(height));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      std::uint64_t noise = util::splitmix64(seed ^ (static_cast<std::uint64_t>(y) << 32 | static_cast<unsigned>(x)));
      int dx = x - cx, dy = y - cy;
      int ring = ((dx * dx + dy * dy) >> 6) & 0xff;
      std::uint8_t* p = img.at(x, y);
      p[0] = static_cast<std::uint8_t>((x * 255 / std::max(1, width - 1) + (noise & 15)) & 0xff);
      p[1] = static_cast<std::uint8_t>((y * 255 / std::max(1, height - 1) + ((noise >> 8) & 15)) & 0xff);
      p[2] = static_cast<std::uint8_t>(ring ^ ((noise >> 16) & 31));
    }
  }
  return img;
}

class Filter {
 public:
  virtual ~Filter() = default;
  virtual Image apply(const Image& input) const = 0;
  virtual std::string describe() const = 0;
};

// A small square kernel with integer weights, applied with clamping at the borders.
template <int Size>
struct Kernel {
  static_assert(Size % 2 == 1, "kernels have a centre");
  int weights[Size][Size];
  int divisor;
};

template <int Size>
Image convolve(const Image& input, const Kernel<Size>& kernel) {
  constexpr int half = Size / 2;
  Image output(input.width, input.height, input.channels);
  for (int y = 0; y < input.height; ++y) {
    for (int x = 0; x < input.width; ++x) {
      for (int c = 0; c < input.channels; ++c) {
        int sum = 0;
        for (int ky = 0; ky < Size; ++ky) {
          int sy = std::clamp(y + ky - half, 0, input.height - 1);
          for (int kx = 0; kx < Size; ++kx) {
            int sx = std::clamp(x + kx - half, 0, input.width - 1);
            sum += kernel.weights[ky][kx] * input.at(sx, sy)[c];
          }
        }
        output.at(x, y)[c] = clamp_byte(sum / kernel.divisor);
      }
    }
  }
  return output;
}

// Separable box blur: a horizontal pass into a temporary image, then a vertical pass.
class BoxBlur final : public Filter {
 public:
  explicit BoxBlur(int radius) : radius_(std::clamp(radius, 1, 8)) {}
  Image apply(const Image& input) const override {
    Image horizontal(input.width, input.height, input.channels);
    pass(input, horizontal, 1, 0);
    Image output(input.width, input.height, input.channels);
    pass(horizontal, output, 0, 1);
    return output;
  }
  std::string describe() const override { return "blur:" + std::to_string(radius_); }

 private:
  void pass(const Image& in, Image& out, int step_x, int step_y) const {
    const int count = 2 * radius_ + 1;
    for (int y = 0; y < in.height; ++y) {
      for (int x = 0; x < in.width; ++x) {
        for (int c = 0; c < in.channels; ++c) {
          int sum = 0;
          for (int k = -radius_; k <= radius_; ++k) {
            int sx = std::clamp(x + k * step_x, 0, in.width - 1);
            int sy = std::clamp(y + k * step_y, 0, in.height - 1);
            sum += in.at(sx, sy)[c];
          }
          out.at(x, y)[c] = static_cast<std::uint8_t>(sum / count);
        }
      }
    }
  }
  int radius_;
};

class Sharpen final : public Filter {
 public:
  Image apply(const Image& input) const override {
    static constexpr Kernel<3> kSharpen{{{0, -1, 0}, {-1, 5, -1}, {0, -1, 0}}, 1};
    return convolve(input, kSharpen);
  }
  std::string describe() const override { return "sharpen"; }
};

class EdgeDetect final : public Filter {
 public:
  Image apply(const Image& input) const override {
    static constexpr Kernel<3> kEdges{{{-1, -1, -1}, {-1, 8, -1}, {-1, -1, -1}}, 1};
    return convolve(input, kEdges);
  }
  std::string describe() const override { return "edges"; }
};

class Grayscale final : public Filter {
 public:
  Image apply(const Image& input) const override {
    Image output(input.width, input.height, input.channels);
    for_each_pixel(input, [&](int x, int y) {
      const std::uint8_t* p = input.at(x, y);
      auto luma = static_cast<std::uint8_t>((77 * p[0] + 150 * p[1] + 29 * p[2]) >> 8);
      std::uint8_t* q = output.at(x, y);
      for (int c = 0; c < output.channels; ++c) q[c] = luma;
    });
    return output;
  }
  std::string describe() const override { return "gray"; }
};

// Nearest-neighbour resize to `percent` of the size (at least 1x1).
class Resize final : public Filter {
 public:
  explicit Resize(int percent) : percent_(std::clamp(percent, 10, 200)) {}
  Image apply(const Image& input) const override {
    int w = std::max(1, input.width * percent_ / 100);
    int h = std::max(1, input.height * percent_ / 100);
    Image output(w, h, input.channels);
    for (int y = 0; y < h; ++y) {
      const int sy = y * input.height / h;
      for (int x = 0; x < w; ++x) {
        const int sx = x * input.width / w;
        std::memcpy(output.at(x, y), input.at(sx, sy), static_cast<std::size_t>(input.channels));
      }
    }
    return output;
  }
  std::string describe() const override { return "resize:" + std::to_string(percent_); }

 private:
  int percent_;
};

class Rotate90 final : public Filter {
 public:
  Image apply(const Image& input) const override {
    Image output(input.height, input.width, input.channels);
    for_each_pixel(input, [&](int x, int y) {
      std::memcpy(output.at(input.height - 1 - y, x), input.at(x, y), static_cast<std::size_t>(input.channels));
    });
    return output;
  }
  std::string describe() const override { return "rotate"; }
};

using FilterPtr = std::unique_ptr<Filter>;

// Turns "blur:2" into a filter; unknown names give nullptr (the caller answers 400).
#if IMAGE_SERVER_REVISION >= 2
FilterPtr make_filter(std::string_view spec) {
  auto colon = spec.find(':');
  std::string_view name = spec.substr(0, colon);
  int argument = colon == std::string_view::npos ? 0 : std::atoi(std::string(spec.substr(colon + 1)).c_str());
  static const std::map<std::string_view, std::function<FilterPtr(int)>> kMakers = {
      {"blur", [](int a) -> FilterPtr { return std::make_unique<BoxBlur>(a ? a : 1); }},
      {"sharpen", [](int) -> FilterPtr { return std::make_unique<Sharpen>(); }},
      {"edges", [](int) -> FilterPtr { return std::make_unique<EdgeDetect>(); }},
      {"gray", [](int) -> FilterPtr { return std::make_unique<Grayscale>(); }},
      {"resize", [](int a) -> FilterPtr { return std::make_unique<Resize>(a ? a : 50); }},
      {"rotate", [](int) -> FilterPtr { return std::make_unique<Rotate90>(); }},
  };
  auto it = kMakers.find(name);
  return it == kMakers.end() ? nullptr : it->second(argument);
}
#else
class FilterFactory {
 public:
  static FilterPtr create(const std::string& spec) {
    std::string name = spec, argument;
    if (auto colon = spec.find(':'); colon != std::string::npos) {
      name = spec.substr(0, colon);
      argument = spec.substr(colon + 1);
    }
    int value = argument.empty() ? 0 : std::atoi(argument.c_str());
    if (name == "blur") return std::make_unique<BoxBlur>(value ? value : 1);
    if (name == "sharpen") return std::make_unique<Sharpen>();
    if (name == "edges") return std::make_unique<EdgeDetect>();
    if (name == "gray") return std::make_unique<Grayscale>();
    if (name == "resize") return std::make_unique<Resize>(value ? value : 50);
    if (name == "rotate") return std::make_unique<Rotate90>();
    return nullptr;
  }
};
#endif

class Pipeline {
 public:
  bool add(std::string_view spec) {
#if IMAGE_SERVER_REVISION >= 2
    FilterPtr filter = make_filter(spec);
#else
    FilterPtr filter = FilterFactory::create(std::string(spec));
#endif
    if (!filter) return false;
    filters_.push_back(std::move(filter));
    return true;
  }
  Image run(Image img) const {
    for (const FilterPtr& filter : filters_) img = filter->apply(img);
    return img;
  }
  std::string describe() const {
    std::string text;
    for (const FilterPtr& filter : filters_) text += (text.empty() ? "" : ",") + filter->describe();
    return text;
  }

 private:
  std::vector<FilterPtr> filters_;
};

}  // namespace IMGSRV_NAMESPACE::image

namespace IMGSRV_NAMESPACE::codec {

// The response body: the image as binary PPM (P6), 8 bits a channel.
std::string encode_ppm(const image::Image& img) {
  std::string header = "P6\n" + std::to_string(img.width) + " " + std::to_string(img.height) + "\n255\n";
  std::string out;
  out.reserve(header.size() + static_cast<std::size_t>(img.width) * img.height * 3);
  out += header;
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) out.append(reinterpret_cast<const char*>(img.at(x, y)), 3);
  }
  return out;
}

}  // namespace IMGSRV_NAMESPACE::codec

#endif  // LLAMALLOC_WORKLOADS_IMAGE_SERVER_IMAGE_H
