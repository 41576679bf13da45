// tokenizer.json -> (input_ids, attention_mask) (`tokenizers`' Tokenizer.encode): its steps in its
// order (added tokens, normalizer, pre-tokenizer, model, post-processor), then truncation and padding as
// `transformers` returns them with padding="max_length", truncation=True: the text's ids cut to max_len minus the
// post-processor's special tokens (so the specials survive), then padded on the right with the manifest's pad_id.
#include <algorithm>

#include "text/added_tokens.h"
#include "text/components.h"
#include "text/tokenizer.h"
#include "util/failure.h"
#include "util/files.h"

namespace ditskip::text {

std::string type_of(const json& spec) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) return "";
  return spec["type"].get<std::string>();
}

bool flag(const json& spec, const char* key, bool fallback) {
  if (!spec.is_object() || !spec.contains(key) || spec[key].is_null()) return fallback;
  return spec[key].get<bool>();
}

void unsupported_type(const json& spec, const std::string& where) {
  const json kind = spec.is_object() && spec.contains("type") ? spec["type"] : json();
  refuse(where + ": type " + py_repr(kind) + " is not supported");
}

Specials build_post_processor(const json& spec, const std::string& where) {
  if (spec.is_null()) return {};
  const std::string kind = type_of(spec);
  if (kind == "Sequence") {
    Specials out;
    const json& list = spec.at("processors");
    for (size_t i = 0; i < list.size(); ++i) {
      Specials s = build_post_processor(list[i], where + ".processors[" + std::to_string(i) + "]");
      out.before.insert(out.before.begin(), s.before.begin(), s.before.end());
      out.after.insert(out.after.end(), s.after.begin(), s.after.end());
    }
    return out;
  }
  if (kind == "ByteLevel") return {};
  if (kind == "RobertaProcessing" || kind == "BertProcessing")
    return {{spec.at("cls").at(1).get<int64_t>()}, {spec.at("sep").at(1).get<int64_t>()}};
  if (kind == "TemplateProcessing") {
    Specials out;
    bool seen = false;
    const json& single = spec.at("single");
    for (size_t j = 0; j < single.size(); ++j) {
      const json& piece = single[j];
      const std::string at = where + ".single[" + std::to_string(j) + "]";
      if (piece.contains("Sequence")) {
        if (piece["Sequence"].at("id") != "A" || seen) refuse(at + ": only one $A sequence is supported");
        seen = true;
      } else if (piece.contains("SpecialToken")) {
        const std::string name = piece["SpecialToken"].at("id").get<std::string>();
        auto& side = seen ? out.after : out.before;
        for (const auto& id : spec.at("special_tokens").at(name).at("ids")) side.push_back(id.get<int64_t>());
      } else {
        refuse(at + ": " + py_repr(piece) + " is neither Sequence nor SpecialToken");
      }
    }
    if (!seen) refuse(where + ".single: the template has no $A");
    return out;
  }
  unsupported_type(spec, where);
}

namespace {

class JsonTokenizer : public Tokenizer {
 public:
  JsonTokenizer(const json& doc, int max_len, int64_t pad_id) : max_len_(max_len), pad_id_(pad_id) {
    if (!doc.is_object() || !doc.contains("model")) refuse("not a tokenizer.json (no `model`)");
    const json none;
    normalize_ = build_normalizer(doc.contains("normalizer") ? doc["normalizer"] : none, "normalizer");
    pre_tokenize_ = build_pre_tokenizer(doc.contains("pre_tokenizer") ? doc["pre_tokenizer"] : none, "pre_tokenizer");
    model_ = build_model(doc["model"], "model");
    specials_ = build_post_processor(doc.contains("post_processor") ? doc["post_processor"] : none, "post_processor");
    std::vector<AddedToken> raw, normed;
    if (doc.contains("added_tokens") && doc["added_tokens"].is_array()) {
      for (const auto& e : doc["added_tokens"]) {
        AddedToken t{utf32(e.at("content").get<std::string>()), e.at("id").get<int64_t>(), flag(e, "lstrip", false),
                     flag(e, "rstrip", false), flag(e, "single_word", false)};
        if (flag(e, "normalized", !flag(e, "special", false))) {
          t.content = normalize_(t.content);
          normed.push_back(t);
        } else {
          raw.push_back(t);
        }
      }
    }
    raw_ = AddedTokens(raw), normed_ = AddedTokens(normed);
    const size_t n_specials = specials_.before.size() + specials_.after.size();
    if (max_len_ < static_cast<int>(n_specials))
      refuse("max_len " + std::to_string(max_len) + " leaves no room next to the post-processor's " +
             std::to_string(n_specials) + " special tokens");
  }

  Encoding encode(const std::string& utf8_text) const override {
    const std::vector<int64_t> ids = token_ids(utf32(utf8_text));
    const size_t room = static_cast<size_t>(max_len_) - specials_.before.size() - specials_.after.size();
    Encoding e;
    e.input_ids = specials_.before;
    e.input_ids.insert(e.input_ids.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min(room, ids.size())));
    e.input_ids.insert(e.input_ids.end(), specials_.after.begin(), specials_.after.end());
    e.attention_mask.assign(e.input_ids.size(), 1);
    e.input_ids.resize(static_cast<size_t>(max_len_), pad_id_);
    e.attention_mask.resize(static_cast<size_t>(max_len_), 0);
    return e;
  }

  int64_t count_tokens(const std::string& utf8_text) const override {
    return static_cast<int64_t>(specials_.before.size() + token_ids(utf32(utf8_text)).size() + specials_.after.size());
  }

  int max_len() const override { return max_len_; }

 private:
  int max_len_;
  int64_t pad_id_;
  Normalizer normalize_;
  PreTokenizer pre_tokenize_;
  std::unique_ptr<Model> model_;
  Specials specials_;
  AddedTokens raw_, normed_;

  // The prompt's ids before the post-processor's special tokens, truncation and padding.
  std::vector<int64_t> token_ids(const U32& text) const {
    std::vector<int64_t> ids;
    for (const Split& s : raw_.split(text)) {
      if (s.id) {
        ids.push_back(*s.id);
        continue;
      }
      const U32 part = normalize_(text.substr(s.start, s.end - s.start));
      for (const Split& t : normed_.split(part)) {
        if (t.id) {
          ids.push_back(*t.id);
        } else if (t.end > t.start) {                  // empty splits are dropped, as in `tokenizers`
          std::vector<Piece> pieces{{part.substr(t.start, t.end - t.start), s.start == 0 && t.start == 0}};
          for (const Piece& word : pre_tokenize_(std::move(pieces))) {
            const std::vector<int64_t> w = model_->tokenize(word.text);
            ids.insert(ids.end(), w.begin(), w.end());
          }
        }
      }
    }
    return ids;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path, int max_len, int64_t pad_id) {
  const json doc = parse_json(read_text(path), path);
  try {
    return std::make_unique<JsonTokenizer>(doc, max_len, pad_id);
  } catch (const Failure& e) {
    refuse(path + ": " + e.what());
  } catch (const json::exception& e) {
    refuse(path + ": not a tokenizer.json (" + e.what() + ")");
  }
}

}  // namespace ditskip::text
