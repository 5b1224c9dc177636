-- An ah-style Lua tool record: runner describes and runs it in the sandbox through lupa.
-- Put it in the workspace's tools/ (or any tools place).
local util = require("lib.line_util") -- modules beside the tool (here lib/) are found by require

return {
  name = "line_count",
  description = "Count the lines of a file, or the lines that contain a word",
  system_prompt = "Use line_count instead of bash `wc -l` or `grep -c`. Paths are relative to the workspace.",
  input_schema = {
    type = "object",
    properties = {
      path = {type = "string", description = "the file, relative to the workspace"},
      word = {type = "string", description = "count only the lines containing this word"},
    },
    required = {"path"},
  },
  execute = function(input)
    local f, err = io.open(input.path, "r")
    if not f then
      return "cannot open " .. input.path .. ": " .. tostring(err), true
    end
    local lines, matching = util.count(f, input.word)
    f:close()
    return {path = input.path, lines = lines, matching = matching}, false
  end,
}
