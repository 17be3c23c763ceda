;;; eglot_e2e.el --- Emacs (batch) + eglot against `gradguard lsp'  -*- lexical-binding: t -*-
;;
;; Run by tests/editors/test_editors.py as
;;   emacs --batch -Q -l eglot_e2e.el
;; with environment:
;;   GG_CONFIG       an Elisp file: the README's eglot snippet (test_editors.py writes it)
;;   GG_FILE         the Python file to open
;;   GG_TARGET_LINE  1-based line whose gradguard finding the scenario acts on
;;   GG_REPORT       where to write the JSON report (the test checks it and the file on disk)
;;   GG_TIMEOUT_S    how long to wait for each step (default 20)
;;
;; What a user does: `M-x eglot' in the Python buffer, the findings show in flymake, point goes to the
;; finding, `M-x eglot-code-actions' offers the actions there and one is picked from the menu (the first
;; quickfix not titled "Suppress ...", else the suppression), then `C-x C-s'.  eglot 1.9's
;; `eglot-code-action-quickfix' only returns the actions without applying them (fixed in later eglot),
;; so the menu command is the path a user of Emacs 28's eglot takes.

(require 'json)
(require 'cl-lib)
(require 'subr-x)

;; Emacs 28 has no built-in eglot: activate Debian's elpa-* packages (eglot needs the newer
;; project/xref/seq from there).  On Emacs 29+ the `require' below finds the built-in one.
(require 'package)
(setq package-user-dir (expand-file-name "elpa" (or (getenv "TMPDIR") temporary-file-directory)))
(add-to-list 'package-directory-list "/usr/share/emacs/site-lisp/elpa")
(package-initialize)
(require 'eglot)
(require 'flymake)

(defvar gg-t0 (float-time))
(defvar gg-report (list (cons 'ok :json-false)))
(defun gg-log (fmt &rest args)
  (princ (format "[%.2fs] %s\n" (- (float-time) gg-t0) (apply #'format fmt args))))
(defun gg-put (key value) (setq gg-report (cons (cons key value) (assq-delete-all key gg-report))))

(defun gg-write-report ()
  (with-temp-file (getenv "GG_REPORT")
    (insert (json-encode gg-report))))

(defun gg-finish (ok msg)
  (gg-put 'ok (if ok t :json-false))
  (gg-put 'message msg)
  (gg-log "%s: %s" (if ok "PASS" "FAIL") msg)
  (ignore-errors (gg-write-report))
  (ignore-errors (let ((srv (eglot-current-server))) (when srv (eglot-shutdown srv))))
  (kill-emacs (if ok 0 1)))

(defun gg-wait (pred timeout)
  "Pump the event loop until PRED is non-nil or TIMEOUT seconds pass."
  (let ((deadline (+ (float-time) timeout)))
    (while (and (not (funcall pred)) (< (float-time) deadline))
      (accept-process-output nil 0.02))
    (funcall pred)))

(defun gg-lsp (diag) (cdr (assoc 'eglot-lsp-diag (flymake-diagnostic-data diag))))

(defun gg-diags ()
  "Flymake's gradguard diagnostics as alists, sorted by line."
  (sort
   (cl-loop for d in (flymake-diagnostics)
            for lsp = (gg-lsp d)
            when (equal (plist-get lsp :source) "gradguard")
            collect (list (cons 'line (line-number-at-pos (flymake-diagnostic-beg d)))
                          ;; offsets in characters (code points) from the line start, not display columns
                          (cons 'column (- (flymake-diagnostic-beg d)
                                           (save-excursion (goto-char (flymake-diagnostic-beg d)) (line-beginning-position))))
                          (cons 'end_column (- (flymake-diagnostic-end d)
                                               (save-excursion (goto-char (flymake-diagnostic-end d)) (line-beginning-position))))
                          (cons 'code (plist-get lsp :code))
                          (cons 'type (symbol-name (flymake-diagnostic-type d)))
                          (cons 'text (flymake-diagnostic-text d))))
   (lambda (a b) (< (cdr (assq 'line a)) (cdr (assq 'line b))))))

(defun gg-target-diags (line)
  (cl-loop for d in (flymake-diagnostics)
           when (and (equal (plist-get (gg-lsp d) :source) "gradguard")
                     (= (line-number-at-pos (flymake-diagnostic-beg d)) line))
           collect d))

(defun gg-main ()
  (let* ((file (getenv "GG_FILE"))
         (line (string-to-number (getenv "GG_TARGET_LINE")))
         (timeout (string-to-number (or (getenv "GG_TIMEOUT_S") "20"))))
    (gg-put 'emacs emacs-version)
    (gg-put 'eglot (or (ignore-errors
                         (package-version-join (package-desc-version (cadr (assq 'eglot package-alist)))))
                       "built-in"))
    (load (getenv "GG_CONFIG") nil t)   ; the README's snippet: eglot-server-programs, workspace configuration
    (find-file file)
    (unless (derived-mode-p 'python-mode) (python-mode))
    ;; `eglot-ensure' connects from post-command-hook, which never runs in batch mode.
    (call-interactively #'eglot)
    (unless (gg-wait (lambda () (bound-and-true-p eglot--managed-mode)) timeout)
      (gg-finish nil "eglot did not manage the buffer"))
    (flymake-start)
    (unless (gg-wait (lambda () (gg-target-diags line)) timeout)
      (gg-put 'diagnostics (gg-diags))
      (gg-finish nil (format "no gradguard diagnostic on line %d" line)))
    (gg-put 'diagnostics (gg-diags))
    (let* ((d (car (gg-target-diags line)))
           (code (plist-get (gg-lsp d) :code))
           (menu nil)
           (chosen nil))
      (gg-put 'target (list (cons 'code code) (cons 'type (symbol-name (flymake-diagnostic-type d)))))
      (goto-char (flymake-diagnostic-beg d))
      ;; M-x eglot-code-actions, then pick from the menu (completing-read; a keyboard-invoked command).
      (cl-letf (((symbol-function 'completing-read)
                 (lambda (_prompt collection &rest _)
                   (setq menu (mapcar #'car collection))
                   (setq chosen
                         (or (cl-find-if (lambda (title) (not (string-prefix-p "Suppress" title)))
                                         (cl-remove-if-not
                                          (lambda (title)
                                            (equal (plist-get (cdr (assoc title collection)) :kind) "quickfix"))
                                          menu))
                             (cl-find (format "Suppress %s on this line" code) menu :test #'equal)))
                   (or chosen (error "no quick fix to pick in %S" menu)))))
        (let ((last-nonmenu-event ?\r))
          (call-interactively #'eglot-code-actions)))
      (gg-put 'menu (vconcat menu))
      (gg-put 'chosen chosen)
      (unless chosen (gg-finish nil "no code action menu"))
      (save-buffer)                     ; flushes didChange, sends didSave
      (unless (gg-wait (lambda ()
                         (not (cl-find-if (lambda (x) (equal (plist-get (gg-lsp x) :code) code))
                                          (gg-target-diags line))))
                       timeout)
        (gg-put 'diagnostics_after (gg-diags))
        (gg-finish nil "the finding did not go away after the fix"))
      (gg-wait (lambda () nil) 0.5)     ; let any last publish land
      (gg-put 'diagnostics_after (gg-diags))
      (gg-put 'modified (if (buffer-modified-p) t :json-false))
      (gg-finish t (format "applied %s" chosen)))))

(condition-case err
    (gg-main)
  (error (gg-finish nil (format "lisp error: %S" err))))
