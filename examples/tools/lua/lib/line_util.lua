-- A helper module required by line_count.lua. It sits in lib/, a subfolder, because runner
-- takes every .lua file directly in a tools folder for a tool record.
local M = {}

function M.count(f, word)
  local lines, matching = 0, 0
  for line in f:lines() do
    lines = lines + 1
    if word and line:find(word, 1, true) then
      matching = matching + 1
    end
  end
  return lines, matching
end

return M
