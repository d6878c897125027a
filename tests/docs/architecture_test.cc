// docs/architecture.md's table of rooms against the build's link graph
// (link_graph.txt, written by the configure: every dctrain_* library and
// program with the project libraries it links directly): each folder's
// "links" cell names exactly what its targets link, every target of the
// graph is in the table, and no room links upward (the graph between
// folders has no cycle).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/paths.h"

namespace dctrain {
namespace {

struct Target {
  std::string folder;
  std::set<std::string> links;
};
using Graph = std::map<std::string, Target>;

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> split(const std::string& text, const std::string& by) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t next; (next = text.find(by, at)) != std::string::npos; at = next + by.size()) {
    out.push_back(text.substr(at, next - at));
  }
  out.push_back(text.substr(at));
  return out;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  const size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// FOLDER NAME DEP,DEP,... per line.
Graph parse_graph(const std::string& text) {
  Graph graph;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string folder, name, deps;
    if (!(fields >> folder >> name)) continue;
    fields >> deps;
    Target& t = graph[name];
    t.folder = folder;
    if (!deps.empty()) {
      for (const std::string& d : split(deps, ",")) t.links.insert(d);
    }
  }
  return graph;
}

// The table's rows: folder -> its links cell. A cell is "none" or items
// "[`TARGET` ]→ room, room" apart by "; ": a room R is the library
// dctrain_R; an item without a target is the folder's library dctrain_F.
struct Documented {
  std::map<std::string, std::set<std::string>> links;  // target -> libraries
  std::map<std::string, std::string> folder;           // target -> folder
};

Documented parse_table(const std::string& text, std::string* problem) {
  Documented out;
  std::istringstream in(text);
  int links_column = -1;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| folder |", 0) == 0) {
      const auto header = split(line, "|");
      for (size_t i = 0; i < header.size(); ++i) {
        if (trim(header[i]) == "links") links_column = static_cast<int>(i);
      }
      continue;
    }
    if (line.rfind("| `", 0) != 0 || links_column < 0) continue;
    const auto cells = split(line, " | ");
    std::string folder = trim(cells[0].substr(1));
    folder.erase(std::remove(folder.begin(), folder.end(), '`'), folder.end());
    if (!folder.empty() && folder.back() == '/') folder.pop_back();
    // " | " splits the first cell off with its leading "|": the links
    // column is the header's index - 1 among these cells.
    const size_t at = static_cast<size_t>(links_column) - 1;
    if (at >= cells.size()) {
      *problem = "row " + folder + " has no links cell";
      return out;
    }
    std::string cell = trim(cells[at]);
    if (!cell.empty() && cell.back() == '|') cell = trim(cell.substr(0, cell.size() - 1));
    if (cell.empty()) continue;  // not a room of code (tests/, docs ...)
    for (const std::string& raw : split(cell, "; ")) {
      const std::string item = trim(raw);
      std::string target = "dctrain_" + folder;
      std::string deps = item;
      if (item.rfind('`', 0) == 0) {
        const size_t close = item.find('`', 1);
        target = item.substr(1, close - 1);
        deps = trim(item.substr(close + 1));
      }
      std::set<std::string>& links = out.links[target];
      out.folder[target] = folder;
      if (deps == "none") continue;
      if (deps.rfind("→", 0) != 0) {
        *problem = "row " + folder + ": \"" + item + "\" is not [`TARGET` ]→ rooms or none";
        return out;
      }
      deps = trim(deps.substr(std::string("→").size()));
      for (const std::string& d : split(deps, ", ")) {
        if (trim(d) != "none") links.insert("dctrain_" + trim(d));
      }
    }
  }
  if (links_column < 0) *problem = "no table with a links column";
  return out;
}

std::string describe(const std::set<std::string>& s) {
  std::string out;
  for (const std::string& x : s) out += (out.empty() ? "" : ", ") + x;
  return out.empty() ? "nothing" : out;
}

TEST(Architecture, TheTableOfRoomsIsTheBuildsLinkGraph) {
  const Graph graph = parse_graph(read(DCTRAIN_LINK_GRAPH));
  ASSERT_GT(graph.size(), 10u) << "no link graph at " << DCTRAIN_LINK_GRAPH;
  std::string problem;
  const Documented table =
      parse_table(read(testing::source_dir() / "docs" / "architecture.md"), &problem);
  ASSERT_TRUE(problem.empty()) << problem;

  for (const auto& [name, target] : graph) {
    auto it = table.links.find(name);
    if (it == table.links.end()) {
      ADD_FAILURE() << name << " (" << target.folder << "/) is not in docs/architecture.md's table";
      continue;
    }
    EXPECT_EQ(table.folder.at(name), target.folder) << name;
    EXPECT_EQ(it->second, target.links)
        << name << ": the table says it links " << describe(it->second) << "; the build links "
        << describe(target.links);
  }
  for (const auto& [name, links] : table.links) {
    EXPECT_TRUE(graph.contains(name)) << "the table names " << name << ", which the build has not";
  }
}

TEST(Architecture, NoRoomLinksUpward) {
  const Graph graph = parse_graph(read(DCTRAIN_LINK_GRAPH));
  ASSERT_FALSE(graph.empty());
  // Folder -> folders it links; a cycle means one of them links upward.
  std::map<std::string, std::set<std::string>> rooms;
  for (const auto& [name, target] : graph) {
    for (const std::string& dep : target.links) {
      auto d = graph.find(dep);
      ASSERT_NE(d, graph.end()) << name << " links " << dep << ", which the graph does not have";
      if (d->second.folder != target.folder) rooms[target.folder].insert(d->second.folder);
    }
  }
  std::map<std::string, int> state;  // 1: on the path, 2: done
  std::vector<std::string> path;
  std::function<void(const std::string&)> visit = [&](const std::string& room) {
    state[room] = 1;
    path.push_back(room);
    for (const std::string& next : rooms[room]) {
      if (state[next] == 1) {
        std::string cycle;
        for (const std::string& p : path) cycle += p + " -> ";
        ADD_FAILURE() << "rooms link in a circle: " << cycle << next;
      } else if (state[next] == 0) {
        visit(next);
      }
    }
    path.pop_back();
    state[room] = 2;
  };
  for (const auto& [room, links] : rooms) {
    if (state[room] == 0) visit(room);
  }
}

}  // namespace
}  // namespace dctrain
