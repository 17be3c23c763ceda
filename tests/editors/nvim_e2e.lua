-- Headless Neovim, its built-in LSP client, against `gradguard lsp` (Neovim 0.7.x and 0.10+/0.11).
--
-- Run by tests/editors/test_editors.py as
--   nvim --headless -u NONE -i NONE -n -c 'luafile nvim_e2e.lua' <file.py>
-- with environment:
--   GG_CONFIG       a Lua file: the README's configuration snippet for this Neovim (test_editors.py writes it)
--   GG_TARGET_LINE  1-based line whose gradguard finding the scenario acts on
--   GG_REPORT       where to write the JSON report (the test checks it and the file on disk)
--   GG_TIMEOUT_MS   how long to wait for each step (default 20000)
--
-- What a user does: the client starts from the README's configuration (0.11: vim.lsp.config + vim.lsp.enable;
-- 0.7: vim.lsp.start_client + vim.lsp.buf_attach_client in a FileType autocommand), the file is opened, the
-- diagnostics appear, the cursor goes to the finding, `vim.lsp.buf.code_action()` lists the quick fixes,
-- one is applied (0.10+: `apply = true` with a filter, 0.7: picked from the vim.ui.select menu), `:write`.
-- The quick fix chosen is the first one not titled "Suppress ..." (a real fix), else the suppression.

local report = { steps = {}, log = {} }
local function log(msg)
  table.insert(report.log, msg)
  io.stdout:write(msg .. "\n")
end

local function write_report()
  local path = assert(vim.env.GG_REPORT, "GG_REPORT unset")
  vim.fn.writefile({ vim.fn.json_encode(report) }, path)
end

local get_clients = vim.lsp.get_clients or vim.lsp.get_active_clients -- get_clients: 0.10+

local function finish(ok, msg)
  report.ok = ok
  report.message = msg
  log((ok and "PASS: " or "FAIL: ") .. msg)
  pcall(write_report)
  for _, c in pairs(get_clients()) do
    c.stop(true)
  end
  vim.wait(2000, function() return #get_clients() == 0 end, 20)
  if ok then vim.cmd("qall!") else vim.cmd("cquit 1") end
end

local function diag_table(bufnr)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    table.insert(out, {
      lnum = d.lnum, col = d.col, end_lnum = d.end_lnum, end_col = d.end_col,
      code = d.code, severity = d.severity, source = d.source, message = d.message,
      namespace = d.namespace,
    })
  end
  table.sort(out, function(a, b)
    if a.lnum ~= b.lnum then return a.lnum < b.lnum end
    return tostring(a.code) < tostring(b.code)
  end)
  return out
end

local function main()
  local target_line = tonumber((assert(vim.env.GG_TARGET_LINE, "GG_TARGET_LINE unset"))) - 1
  local timeout = tonumber(vim.env.GG_TIMEOUT_MS or "20000")
  local v = vim.version()
  report.nvim = ("%d.%d.%d"):format(v.major, v.minor, v.patch)
  local modern = vim.lsp.config ~= nil and vim.lsp.enable ~= nil -- 0.11+

  -- the README's snippet for this Neovim (0.11: vim.lsp.config + vim.lsp.enable; 0.7: vim.lsp.start_client from
  -- a FileType autocommand), with the test's server command in place of { "gradguard", "lsp" }
  -- how the findings arrive: pushed (publishDiagnostics) or pulled (textDocument/diagnostic, 0.10+), counted
  -- by wrapping the default handlers, which the client looks up when each message arrives
  report.pushes, report.pulls = 0, {}
  local push, pull = vim.lsp.handlers["textDocument/publishDiagnostics"], vim.lsp.handlers["textDocument/diagnostic"]
  vim.lsp.handlers["textDocument/publishDiagnostics"] = function(err, result, ctx, config)
    report.pushes = report.pushes + 1
    return push(err, result, ctx, config)
  end
  if pull then
    vim.lsp.handlers["textDocument/diagnostic"] = function(err, result, ctx, config)
      table.insert(report.pulls, result and result.kind or "error")
      return pull(err, result, ctx, config)
    end
  end
  dofile(assert(vim.env.GG_CONFIG, "GG_CONFIG unset"))
  vim.cmd("filetype on")
  vim.cmd("edit " .. vim.fn.fnameescape(vim.fn.argv(0)))
  local bufnr = vim.api.nvim_get_current_buf()
  report.filetype = vim.bo[bufnr].filetype
  if report.filetype ~= "python" then return finish(false, "filetype is " .. report.filetype) end

  -- 1. diagnostics arrive
  local function target_diags()
    local out = {}
    for _, d in ipairs(vim.diagnostic.get(bufnr, { lnum = target_line })) do
      if d.source == "gradguard" then table.insert(out, d) end
    end
    return out
  end
  if not vim.wait(timeout, function() return #target_diags() > 0 end, 20) then
    report.diagnostics = diag_table(bufnr)
    return finish(false, "no gradguard diagnostic on line " .. (target_line + 1))
  end
  local client = get_clients({ bufnr = bufnr })[1] or get_clients()[1]
  report.offset_encoding = client.offset_encoding
  report.diagnostics = diag_table(bufnr)
  local d = target_diags()[1]
  report.target = { lnum = d.lnum, col = d.col, end_col = d.end_col, code = d.code }
  table.insert(report.steps, "diagnostics")

  -- every request the client sends from here on (a code action's edit may come from codeAction/resolve)
  report.requests = {}
  local request = client.request
  if modern then
    client.request = function(self, method, ...)
      table.insert(report.requests, method)
      return request(self, method, ...)
    end
  else
    client.request = function(method, ...)
      table.insert(report.requests, method)
      return request(method, ...)
    end
  end

  -- 2. the code-action menu at the finding, as `:lua vim.lsp.buf.code_action()` shows it
  vim.api.nvim_win_set_cursor(0, { d.lnum + 1, d.col })
  local menu
  local real_select = vim.ui.select
  vim.ui.select = function(items, _, on_choice)
    menu = {}
    for _, it in ipairs(items) do
      local a = it.action or it[2] -- 0.10+: {action=, ctx=}; 0.7: {client_id, action}
      table.insert(menu, { title = a.title, kind = a.kind, preferred = a.isPreferred or false })
    end
    on_choice(nil) -- just looking
  end
  if modern then
    vim.lsp.buf.code_action({ context = { only = { "quickfix" } } })
  else
    vim.lsp.buf.code_action({ only = { "quickfix" } })
  end
  if not vim.wait(timeout, function() return menu ~= nil end, 20) then
    return finish(false, "no code-action menu")
  end
  report.menu = menu
  local chosen
  for _, item in ipairs(menu) do
    if item.kind == "quickfix" and not vim.startswith(item.title, "Suppress") then chosen = item.title break end
  end
  if not chosen then
    for _, item in ipairs(menu) do
      if item.title == ("Suppress %s on this line"):format(d.code) then chosen = item.title end
    end
  end
  if not chosen then return finish(false, "no quick fix to apply: " .. vim.inspect(menu)) end
  report.chosen = chosen
  table.insert(report.steps, "menu")

  -- 3. apply it, the way a user does
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  if modern then
    vim.ui.select = function() error("apply=true with one action left must not prompt") end
    vim.lsp.buf.code_action({
      context = { only = { "quickfix" } },
      filter = function(a) return a.title == chosen end,
      apply = true,
    })
  else
    vim.ui.select = function(items, _, on_choice)
      for i, it in ipairs(items) do
        if it[2].title == chosen then return on_choice(it, i) end
      end
      on_choice(nil)
    end
    vim.lsp.buf.code_action({ only = { "quickfix" } })
  end
  if not vim.wait(timeout, function() return vim.api.nvim_buf_get_changedtick(bufnr) ~= tick end, 20) then
    return finish(false, "the code action did not change the buffer")
  end
  vim.ui.select = real_select
  table.insert(report.steps, "applied")

  -- 4. save; the server re-analyses and the finding is gone
  vim.cmd("silent write")
  local code = d.code
  local function gone()
    for _, x in ipairs(vim.diagnostic.get(bufnr)) do
      if x.source == "gradguard" and x.code == code and x.lnum == d.lnum then return false end
    end
    return true
  end
  if not vim.wait(timeout, gone, 20) then
    report.diagnostics_after = diag_table(bufnr)
    return finish(false, "the finding did not go away after the fix")
  end
  vim.wait(500, function() return false end, 50) -- let any last publish land
  report.diagnostics_after = diag_table(bufnr)
  report.modified = vim.bo[bufnr].modified
  table.insert(report.steps, "saved")
  finish(true, "applied " .. chosen)
end

local ok, e = pcall(main)
if not ok then
  report.ok = false
  report.message = "lua error: " .. tostring(e)
  log("FAIL: " .. report.message)
  pcall(write_report)
  vim.cmd("cquit 1")
end
