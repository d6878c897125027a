// The README and docs/ hold together: every relative link names a file of
// the repository, and every #anchor a heading of its target (GitHub's rule:
// lower case, punctuation but '-' and '_' dropped, spaces to '-'); the
// README stays a door (at most 300 lines). Code blocks are skipped.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kSource = DCTRAIN_SOURCE_DIR;

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The lines outside ``` fences.
std::vector<std::string> prose(const fs::path& path) {
  std::vector<std::string> out;
  bool fenced = false;
  for (const std::string& line : read_lines(path)) {
    if (line.rfind("```", 0) == 0) {
      fenced = !fenced;
      continue;
    }
    if (!fenced) out.push_back(line);
  }
  return out;
}

std::string anchor_of(const std::string& heading) {
  std::string out;
  for (unsigned char c : heading) {
    if (std::isalnum(c) || c == '_' || c == '-') {
      out.push_back(static_cast<char>(std::tolower(c)));
    } else if (c == ' ') {
      out.push_back('-');
    } else if (c >= 0x80) {
      out.push_back(static_cast<char>(c));  // UTF-8 letters stay, as GitHub keeps them
    }
  }
  return out;
}

std::set<std::string> anchors(const fs::path& path) {
  static const std::regex heading(R"(^#{1,6} +(.*?) *$)");
  std::set<std::string> out;
  for (const std::string& line : prose(path)) {
    std::smatch m;
    if (std::regex_match(line, m, heading)) out.insert(anchor_of(m[1].str()));
  }
  return out;
}

std::vector<fs::path> documents() {
  std::vector<fs::path> out = {kSource / "README.md"};
  for (const auto& entry : fs::recursive_directory_iterator(kSource)) {
    const fs::path& p = entry.path();
    const std::string relative = fs::relative(p, kSource).string();
    if (relative.rfind("build", 0) == 0 || relative.rfind(".git", 0) == 0) continue;
    if (p.extension() == ".md" && p.filename() != "README.md") out.push_back(p);
    if (p.filename() == "README.md" && p.parent_path() != kSource) out.push_back(p);
  }
  return out;
}

TEST(Documents, EveryRelativeLinkAndAnchorResolves) {
  static const std::regex link(R"(\]\(<?([^)<> ]+)>?\))");
  std::vector<std::string> broken;
  size_t checked = 0;
  for (const fs::path& doc : documents()) {
    for (const std::string& line : prose(doc)) {
      for (auto it = std::sregex_iterator(line.begin(), line.end(), link);
           it != std::sregex_iterator(); ++it) {
        const std::string target = (*it)[1].str();
        if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
        const size_t hash = target.find('#');
        const std::string file = target.substr(0, hash);
        const fs::path resolved = file.empty() ? doc : doc.parent_path() / file;
        ++checked;
        const std::string where = fs::relative(doc, kSource).string() + ": (" + target + ")";
        if (!fs::exists(resolved)) {
          broken.push_back(where + " names no file");
          continue;
        }
        if (hash == std::string::npos) continue;
        if (resolved.extension() != ".md" || !anchors(resolved).count(target.substr(hash + 1)))
          broken.push_back(where + " names no heading there");
      }
    }
  }
  EXPECT_GT(checked, 20u) << "the README and docs/ link to each other";
  EXPECT_TRUE(broken.empty()) << [&] {
    std::ostringstream out;
    for (const std::string& b : broken) out << b << "\n";
    return out.str();
  }();
}

TEST(Documents, TheReadmeIsADoorNotTheManual) {
  const auto lines = read_lines(kSource / "README.md");
  EXPECT_LE(lines.size(), 300u) << "the rest belongs in docs/";
  // It names the documents it opens onto.
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  for (const char* doc : {"docs/running.md", "docs/experiments.md", "docs/failure-handling.md",
                          "docs/security.md", "docs/scaling.md", "docs/contributing.md"}) {
    EXPECT_NE(text.find(std::string("](") + doc + ")"), std::string::npos) << doc;
  }
}

}  // namespace
