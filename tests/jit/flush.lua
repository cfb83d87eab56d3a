-- LuaJIT (issue 19): compile traces, throw all machine code away with jit.flush(), compile
-- again into the same memory with other control flow. Deterministic output.
local function kernel(n, k)
  local s = 0
  for i = 1, n do
    if i % k == 0 then s = s + i else s = s - 1 end
  end
  return s
end
local function other(n)
  local t = {}
  for i = 1, n do t[i] = (i * 7) % 13 end
  local s = 0
  for i = 1, n do
    if t[i] > 6 then s = s + t[i] elseif t[i] > 2 then s = s - 1 end
  end
  return s
end
local total = 0
for round = 1, 4 do
  total = total + kernel(3000, 3 + round)
  jit.flush()
  total = total + other(2000 + round)
  jit.flush()
end
print("flush.lua: " .. total)
