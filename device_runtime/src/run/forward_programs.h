// The frozen base model's forward on the device, one block at a time (ditskip_edge/runtime/forward.py
// ForwardPrograms): the bundle's encode program(s) (untiled, tiled per encode_tiling with tiling.py's blend, or a
// staged encoder) give x0 from a crop; the embed program the streams and context; the block programs, loaded one
// at a time unless keep_blocks, the front / back residuals, subtracted in float32 as forward.py does.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bundle/bundle.h"
#include "run/program_runner.h"
#include "subject/codecs.h"

namespace ditskip {

struct SubjectPrograms {                        // forward.py subject_programs
  std::vector<std::pair<std::string, std::vector<ProgramEntry>>> encoders;   // pixel tile key -> encode chain
  ProgramEntry embed;
  std::map<int, ProgramEntry> blocks;
  json tiling;                                  // encode_tiling_of
};
SubjectPrograms subject_programs(const Bundle& bundle);

class ForwardPrograms {
 public:
  ForwardPrograms(const Bundle& bundle, bool keep_blocks);
  const SubjectPrograms& programs() const { return programs_; }
  void check_loads();                           // every program loaded and run once on zeros
  FloatTensor x0(const float* photo_chw, int64_t height, int64_t width, const int64_t crop_box[3]);
  // {"front.<stream>", ..., "back.img"} in forward.py's order
  std::vector<std::pair<std::string, FloatTensor>> residuals(const FloatTensor& x0, const FloatTensor& noise, float t,
                                                             const std::map<std::string, FloatTensor>& cond);

 private:
  std::vector<FloatTensor> encode_shape(const std::vector<FloatTensor>& tiles);
  ProgramRunner& block(int i);
  const Bundle& bundle_;
  SubjectPrograms programs_;
  bool keep_blocks_;
  int num_blocks_, n_front_, n_back_;
  int64_t s_min_px_;
  std::map<std::pair<std::string, int>, std::unique_ptr<ProgramRunner>> encode_;
  std::unique_ptr<ProgramRunner> embed_;
  std::map<int, std::unique_ptr<ProgramRunner>> blocks_;
};

}  // namespace ditskip
