-- Run by bench/bench_neovim.py as
--   nvim --headless -u NONE -i NONE -n -c 'luafile bench_neovim.lua' <file.py>
-- Environment: GG_SERVER_CMD (JSON list), GG_SPOTS (JSON list of 0-based lines to edit), GG_EDITS (count),
-- GG_CLIENT_DEBOUNCE_MS ("" = Neovim's default), GG_REPORT (JSON written here), GG_TIMEOUT_MS.
--
-- Neovim's own client (vim.lsp.config + vim.lsp.enable, as the README configures it) talks to the server;
-- times are taken inside Neovim's event loop with vim.uv.hrtime():
--   edit  nvim_buf_set_lines inserts or deletes one line (what typing `o<Esc>` or `dd` does to the buffer);
--   sent  LspNotify for textDocument/didChange: the client has written the change to the server;
--   shown the diagnostics handler for the buffer's new version has returned (vim.diagnostic holds them): the
--         textDocument/diagnostic response (Neovim 0.11 pulls after each didChange when the server offers
--         pulls, as gradguard does) or a publishDiagnostics carrying that version.
local report = { edits = {}, log = {} }
local function log(msg) table.insert(report.log, msg) end
local function env(name) return vim.env[name] or error(name .. " unset") end

local function finish(ok, msg)
  report.ok, report.message = ok, msg
  pcall(vim.fn.writefile, { vim.fn.json_encode(report) }, vim.env.GG_REPORT)
  pcall(function()
    for _, c in pairs(vim.lsp.get_clients()) do c:stop(true) end
    vim.wait(2000, function() return #vim.lsp.get_clients() == 0 end, 20)
  end)
  os.exit(ok and 0 or 1) -- even when the client is in a bad state
end

local function main()
  local timeout = tonumber(vim.env.GG_TIMEOUT_MS or "30000")
  local spots = vim.fn.json_decode(env("GG_SPOTS"))
  local count = tonumber(env("GG_EDITS"))
  local v = vim.version()
  report.nvim = ("%d.%d.%d"):format(v.major, v.minor, v.patch)

  local sent, shown = {}, {} -- buffer version -> hrtime
  local opened_at
  vim.api.nvim_create_autocmd("LspNotify", {
    callback = function(args)
      local method = args.data.method
      if method == "textDocument/didChange" then
        sent[vim.lsp.util.buf_versions[args.buf]] = vim.uv.hrtime()
      elseif method == "textDocument/didOpen" then
        opened_at = opened_at or vim.uv.hrtime()
      end
    end,
  })
  -- Neovim 0.11 pulls diagnostics (textDocument/diagnostic) from a server that offers them, else takes pushes
  local function timed(method, version_of)
    local handler = vim.lsp.handlers[method]
    vim.lsp.handlers[method] = function(err, result, ctx, config)
      local out = handler(err, result, ctx, config)
      local version = version_of(result, ctx)
      if err == nil and version ~= nil then
        shown[version] = shown[version] or vim.uv.hrtime()
      end
      log(("%s v%s%s"):format(method, tostring(version), err and (": " .. tostring(err.message)) or ""))
      return out
    end
  end
  timed("textDocument/publishDiagnostics", function(result) return result.version end)
  timed("textDocument/diagnostic", function(_, ctx) return ctx.version end)

  local flags = nil
  if vim.env.GG_CLIENT_DEBOUNCE_MS ~= nil and vim.env.GG_CLIENT_DEBOUNCE_MS ~= "" then
    flags = { debounce_text_changes = tonumber(vim.env.GG_CLIENT_DEBOUNCE_MS) }
  end
  vim.lsp.config("gradguard", {
    cmd = vim.fn.json_decode(env("GG_SERVER_CMD")),
    filetypes = { "python" },
    root_markers = { "pyproject.toml", ".git" },
    flags = flags,
  })
  vim.lsp.enable("gradguard")
  vim.cmd("filetype on")
  vim.cmd("edit " .. vim.fn.fnameescape(vim.fn.argv(0)))
  local bufnr = vim.api.nvim_get_current_buf()

  -- first diagnostics after didOpen, from a server that has just started (a cold figure)
  if not vim.wait(timeout, function() return next(shown) ~= nil end, 1) then
    return finish(false, ("no diagnostics after open (%d clients, %d diagnostics)"):format(
      #vim.lsp.get_clients({ bufnr = bufnr }), #vim.diagnostic.get(bufnr)))
  end
  local first_version = next(shown)
  report.first_ms = (shown[first_version] - opened_at) / 1e6
  local client = vim.lsp.get_clients({ bufnr = bufnr })[1]
  report.debounce_text_changes = client and client.flags and client.flags.debounce_text_changes
  report.diagnostics = #vim.diagnostic.get(bufnr)

  -- the first GG_EDITS edits include the warm-up ones; the driver leaves those out
  for i = 1, count do
    local line = spots[math.floor((i - 1) / 2) % #spots + 1]
    local insert = i % 2 == 1
    local edit_at = vim.uv.hrtime()
    if insert then
      vim.api.nvim_buf_set_lines(bufnr, line, line, true, { "# edit" })
    else
      vim.api.nvim_buf_set_lines(bufnr, line, line + 1, true, {})
    end
    local version = vim.lsp.util.buf_versions[bufnr]
    if not vim.wait(timeout, function() return shown[version] ~= nil end, 1) then
      report.edits[i] = { line = line, insert = insert, version = version, missed = true }
      log(("edit %d (version %d): no diagnostics within %d ms"):format(i, version, timeout))
    else
      report.edits[i] = {
        line = line, insert = insert, version = version,
        edit_to_sent_ms = sent[version] and (sent[version] - edit_at) / 1e6 or vim.NIL,
        sent_to_shown_ms = sent[version] and (shown[version] - sent[version]) / 1e6 or vim.NIL,
        edit_to_shown_ms = (shown[version] - edit_at) / 1e6,
      }
    end
  end
  finish(true, "done")
end

local ok, err = xpcall(main, debug.traceback)
if not ok then finish(false, tostring(err)) end
