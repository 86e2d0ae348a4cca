"""The program a sandboxed process runs (``python -I -c HARNESS ctrl_in ctrl_out``): kept apart from its
supervisor (``supervisor.py``) because it is text that runs in the child, not code of this process.

What it does, in order: read the bundle (one line on the control pipe); with a ``view`` (the kernel layer) make
the run's file system (under unshare all of it; under bwrap what bwrap leaves: see ``namespaces.py``) and move into
it, drop every capability; load the seccomp filter (where the bundle has one); as the namespace's first process
(under unshare), fork (the first process only waits); install the audit hook; run the program; then either report
how it ended (``run`` mode) or answer the grader's requests (``serve`` mode: the program's names, then calls in,
strictly encoded values, handles or exceptions out).  In ``warm`` mode (``warm.py``) the process runs no program:
per request it forks a child that goes on as a ``run`` harness in an empty directory of its own, and reports the
child's ending (output, reports, exit status) when the child is gone.
"""

# The child's program.  It runs with -I (no user site, no PYTHONPATH, no cwd on sys.path).  One line in on the
# control pipe (the bundle), then: run the program; in "run" mode report how it ended; in "serve" mode report the
# program's names and answer the grader's requests (calls in, strictly encoded built-in values or exceptions out)
# until the grader ends.  Nothing the child sends is a verdict: the grader evaluates every test itself.
HARNESS = r"""
import sys, os, builtins
def _enter_seccomp(bpf):
    # The syscall filter the supervisor compiled with libseccomp (a BPF program, 8 bytes an instruction).
    # no_new_privs first: an unprivileged process may load a filter only with it, and the run inherits both.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    class Prog(ctypes.Structure):  # struct sock_fprog
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = Prog(len(bpf) // 8, ctypes.addressof(buf))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs")
    if libc.prctl(22, 2, ctypes.addressof(prog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp: " + os.strerror(ctypes.get_errno()))
def _forget_ctypes():
    for name in [m for m in sys.modules if m in ("ctypes", "_ctypes") or m.startswith("ctypes.")]:
        del sys.modules[name]  # an import of a cached module raises no audit event: make the program's import a new one
def _mount(src, target, fs, flags, data=None):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    enc = lambda x: None if x is None else x.encode()
    if libc.mount(enc(src), enc(target), enc(fs), flags, enc(data)) != 0:
        raise OSError(ctypes.get_errno(), "mount " + target + ": " + os.strerror(ctypes.get_errno()))
def _umount(target):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(target.encode(), 2) != 0:  # MNT_DETACH
        raise OSError(ctypes.get_errno(), "umount " + target + ": " + os.strerror(ctypes.get_errno()))
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
def _set_user_limits(proc, limits):
    # Counts the kernel keeps per user namespace (inotify instances and watches, namespaces), set in this run's own
    # namespace while it may (root there, CAP_SYS_RESOURCE): a run takes at most these, however many processes it
    # makes.  ``proc``: a procfs (the sysctl files a process opens are those of its own user namespace).
    for name, value in limits:
        path = proc + "/sys/user/" + name
        if os.path.exists(path):  # older kernels lack some
            with open(path, "w") as fh:
                fh.write(str(value))
def _read_only_device(path):
    # device files keep their device (no MS_NODEV): /dev/null, /dev/zero and /dev/urandom must open; read-only,
    # so that the run (root in its namespace, the files' owner where the grader is root) cannot chmod them
    _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
def _scratch(work, options):
    # The run's directory is a tmpfs of its own, at the path of the (empty) directory made for it: what it writes
    # is bounded in bytes and files (and counted by the memory cgroup), executes nothing, and vanishes with the
    # namespace, however deep it is.
    _mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options)
def _drop_privileges(seccomp):
    # Root of its namespace, the run keeps no capability: no mount, chroot, raw socket or namespace of its own.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs")
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP (EINVAL past the last capability)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: empty (two 32-bit words each)
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset: " + os.strerror(ctypes.get_errno()))
    if seccomp:
        _enter_seccomp(seccomp)
def _loopback_down():
    # bwrap brings the network namespace's loopback device up (127.0.0.1 on it); unshare leaves it down with no
    # address, as it is here after this: no device that reaches anything, not even the run itself.  SIOCSIFADDR
    # with 0.0.0.0 deletes the address, SIOCSIFFLAGS without IFF_UP takes the device down.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM
    if fd < 0:
        raise OSError(ctypes.get_errno(), "socket: " + os.strerror(ctypes.get_errno()))
    try:
        for request, what in ((0x8916, "SIOCSIFADDR"), (0x8913, "SIOCGIFFLAGS"), (0x8914, "SIOCSIFFLAGS")):
            if request != 0x8914:  # struct ifreq: the name, then sin_family 2, port 0, 0.0.0.0; or the flags
                ifreq = ctypes.create_string_buffer(b"lo", 40)
                ctypes.c_short.from_buffer(ifreq, 16).value = 2 if request == 0x8916 else 0
            else:
                ctypes.c_short.from_buffer(ifreq, 16).value &= ~1  # IFF_UP
            if libc.ioctl(fd, request, ifreq) != 0:
                raise OSError(ctypes.get_errno(), what + " lo: " + os.strerror(ctypes.get_errno()))
    finally:
        libc.close(fd)
def _make_view(view):
    # Under unshare the harness makes the view itself (bwrap made it before the interpreter started): a fresh tmpfs,
    # the interpreter's library directories and a few device files bound at their own paths in it, read-only (the
    # device files made read-only after), and the mount point of the run's directory.
    root = view["root"]
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, view["view_root"])
    for path in view["read_only"]:
        target = root + path
        if os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
        _mount(path, target, None, MS_BIND | MS_REC)
        if not path.startswith("/dev/"):
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.makedirs(root + view["work"], exist_ok=True)
def _enter_view(view, seccomp):
    # The view becomes "/": the interpreter's library directories and a few device files read-only at their own
    # paths, the run's directory (a size-limited tmpfs) read-write, nothing else (no /proc, /tmp, /home, the
    # grader's files, other runs).  pivot_root and detaching the old root leave no path back to it.  Under bwrap
    # this process holds CAP_SYS_ADMIN, CAP_SYS_RESOURCE, CAP_NET_ADMIN and CAP_SETPCAP until it drops them all;
    # under unshare every capability in its namespaces.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    root, work, bwrap = view["root"], view["work"], view.get("bwrap")
    if bwrap:
        try:  # where bwrap covers /proc/sys read-only: the counts below are its procfs's own
            _umount("/proc/sys")
        except OSError:
            pass
    _set_user_limits("/proc", view["user_limits"])
    if bwrap:
        _loopback_down()
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    if not bwrap:
        _make_view(view)
    for path in view["read_only"]:
        if path.startswith("/dev/"):
            _read_only_device(root + path)
    _scratch(root + work, view["scratch"])
    os.mkdir(root + "/.old")
    if libc.syscall(view["pivot_root"], root.encode(), (root + "/.old").encode()) != 0:
        raise OSError(ctypes.get_errno(), "pivot_root: " + os.strerror(ctypes.get_errno()))
    os.chdir("/")
    _umount("/.old")
    os.rmdir("/.old")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(work)
    if bwrap:
        os.environ.pop("PWD", None)  # bwrap sets it; the run's environment is the supervisor's, as under unshare
    _drop_privileges(seccomp)
def _main(_read=os.read, _write=os.write, _exit=os._exit, _exec=exec, _compile=compile, _type=type,
          _isinstance=isinstance, _str=str, _repr=repr, _len=len, _tuple=tuple, _list=list, _dict=dict, _set=set,
          _frozenset=frozenset, _sorted=sorted, _any=any, _float=float, _getattr=getattr, _iter=iter, _next=next,
          _bool=bool, _BaseException=BaseException, _StopIteration=StopIteration, _bytes=bytes, _int=int,
          _getcwd=os.getcwd):
    ctrl_in, ctrl_out = int(sys.argv[1]), int(sys.argv[2])
    pending = [b""]
    def readline():
        while b"\n" not in pending[0]:
            b = _read(ctrl_in, 1 << 16)
            if not b:
                line, pending[0] = pending[0], b""
                return line
            pending[0] += b
        line, _, pending[0] = pending[0].partition(b"\n")
        return line
    import ast
    literal = ast.literal_eval
    bundle = literal(readline().decode())
    token, mode, program = bundle["token"], bundle["mode"], bundle["program"]
    read_roots, denied = _tuple(bundle["read_roots"]), _tuple(bundle["denied_roots"])
    realpath, fspath, join, sep = os.path.realpath, os.fspath, os.path.join, os.sep
    def report(kind, text):
        line = token + " " + kind + " " + _str(text).replace(chr(10), " ") + chr(10)
        data = line.encode()
        while data:
            data = data[_write(ctrl_out, data):]
    def inside(path, roots):
        # a relative path is the process's real working directory's (after an os.chdir too), not the run's
        p = realpath(join(_getcwd(), fspath(path)))
        return _any(p == r or p.startswith(r + sep) for r in roots)
    view, seccomp = bundle.get("view"), bundle.get("seccomp")
    try:
        if view:  # kernel layer: in new user/mount/pid/net/ipc/uts namespaces, the file system becomes this run's view
            _enter_view(view, seccomp)
        elif seccomp:
            _enter_seccomp(seccomp)
        _forget_ctypes()
    except BaseException as e:
        report("SETUP", _type(e).__name__ + ": " + _str(e))
        _exit(0)
    if view and os.getpid() == 1:
        # The namespace's first process ignores signals it has no handler for (SIGXCPU at the CPU limit among
        # them): it only waits, and the run is its child, which ends as any process does.  (Under bwrap, bwrap's
        # own first process waits, and this one is its child already.)
        pid = os.fork()
        if pid:
            os.close(ctrl_in)
            os.close(ctrl_out)
            status = os.waitpid(pid, 0)[1]
            _exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    home = realpath(os.getcwd())  # after the view: the run directory at its own path
    def violation(what):
        report("VIOLATION", what)
        _exit(86)
    forbidden_imports = {"ctypes", "_ctypes", "_posixsubprocess", "multiprocessing", "_multiprocessing",
                         "socket", "_socket", "ssl", "_ssl", "pty", "resource", "_xxsubinterpreters"}
    writes = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.chmod", "os.chown",
              "os.truncate", "os.utime", "os.link", "os.symlink", "os.chflags", "os.lchown", "os.mkfifo",
              "os.mknod", "shutil.move", "shutil.copyfile"}
    processes = {"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
                 "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill", "os.setsid",
                 "os.setpgid", "os.setuid", "os.setgid"}
    walks = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.addaudithook"}
    def hook(event, args):
        if event == "open":
            path = args[0]
            if path is None or _isinstance(path, int):
                return  # a descriptor the process already holds
            mode = args[1] if _len(args) > 1 and _isinstance(args[1], _str) else "r"
            flags = args[2] if _len(args) > 2 and _isinstance(args[2], int) else 0
            if inside(path, (home,)):
                return
            if (_any(c in mode for c in "wax+") or flags & 3) and not inside(path, ("/dev/null",)):
                violation("write outside the working directory: " + _str(path))
            if inside(path, denied) or not inside(path, read_roots):
                violation("read outside the working directory: " + _str(path))
        elif event in ("os.listdir", "os.scandir", "os.chdir", "glob.glob", "os.walk"):
            target = args[0] if args and args[0] is not None else "."
            if not _isinstance(target, int) and not inside(target, (home,)) and not (
                    inside(target, read_roots) and not inside(target, denied)):
                violation(event + " outside the working directory: " + _str(target))
        elif event in writes:
            paths = [a for a in args[:2] if _isinstance(a, (_str, bytes))]
            if _any(not inside(a, (home,)) for a in paths):
                violation(event + " outside the working directory: " + _repr(paths))
        elif event in processes or event in walks:
            violation(event)
        elif event.startswith("socket.") or event.startswith("ctypes."):
            violation(event)
        elif event == "import" and args[0].split(".")[0] in forbidden_imports:
            violation("import " + args[0])
    handles = []  # objects that are not values, named to the grader by their index
    def encode(v, depth=0):
        # built-in values only (exact types: a subclass of int may carry any __eq__); anything else is a handle
        t = _type(v)
        if depth > 50:
            raise TypeError("value nested too deeply")
        if v is None or t is _bool or t is _int or t is _str or t is _bytes:
            return v
        if t is _float:
            return ("float", _repr(v))
        if t is _list or t is _tuple:
            return (t.__name__, [encode(x, depth + 1) for x in v])
        if t is _set or t is _frozenset:
            return (t.__name__, _sorted([encode(x, depth + 1) for x in v], key=_repr))
        if t is _dict:
            return ("dict", [(encode(k, depth + 1), encode(x, depth + 1)) for k, x in v.items()])
        raise TypeError("not a built-in value")
    def decode(x):
        if _type(x) is _tuple and _len(x) == 2 and _type(x[0]) is _str:
            kind, body = x
            if kind == "float":
                return _float(body)
            if kind == "list":
                return [decode(e) for e in body]
            if kind == "tuple":
                return _tuple(decode(e) for e in body)
            if kind == "set":
                return {decode(e) for e in body}
            if kind == "frozenset":
                return _frozenset(decode(e) for e in body)
            if kind == "dict":
                return {decode(k): decode(v) for k, v in body}
            if kind == "ref":
                return resolve(body)
        return x
    def resolve(target):
        kind, key = target
        return namespace[key] if kind == "name" else handles[key]
    def answer(v):
        try:
            report("VALUE", _repr(encode(v)))
        except (TypeError, ValueError):
            handles.append(v)
            report("HANDLE", _repr((_len(handles) - 1, _str(_type(v).__name__))))
    hook_on = bundle.get("hook", True)
    if mode == "warm":
        # A warm interpreter (tool calls during rollouts): this process runs no program itself.  It imports the
        # modules of the bundle's preload, then for each request forks a child, a fresh copy of it: the child takes
        # an empty directory of its own and goes on below as a "run" harness (the hook, the program, its report);
        # this process drains what the child prints under the cap, ends it at the wall clock, kills what is left
        # of its process group and empties the run directory, so that nothing of one request reaches the next.
        for name in bundle.get("preload", ()):
            try:
                __import__(name)
            except BaseException:
                pass
        for name in _list(sys.modules):  # a cached module's import raises no audit event: none of these is cached
            if name.split(".")[0] in forbidden_imports:
                del sys.modules[name]
        import time, select, signal, shutil, ctypes
        # the child dies with this process (PR_SET_PDEATHSIG, SIGKILL), whatever layer it runs under: a warm
        # process killed while a request runs leaves no program running without its wall clock
        _set_death_signal, zygote = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()
        _set_death_signal(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: its /proc files and memory are not its children's
        _forget_ctypes()
        retire_cpu = bundle["retire_cpu_seconds"]
        report("WARM", _str(os.getpid()))
        served = 0
        while True:
            line = readline()
            if not line:
                _exit(0)
            program, wall, cap = literal(line.decode())
            spent = os.times()
            if spent[0] + spent[1] > retire_cpu:  # its own CPU time nears the limit it runs under: a new one goes on
                report("RETIRE", "")
                _exit(0)
            report("TAKEN", "")  # from here on, this process ending is the program's doing
            served += 1
            run_dir = join(home, "run-" + _str(served))
            os.mkdir(run_dir, 0o700)
            fds = [os.pipe() for _ in range(3)]  # stdout, stderr, the child's reports
            started = time.monotonic()
            pid = os.fork()
            if pid == 0:
                _set_death_signal(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
                if os.getppid() != zygote:  # it ended before that line: nobody would end this one
                    _exit(1)
                os.setpgid(0, 0)
                os.close(ctrl_in)
                os.close(ctrl_out)
                for r, w in fds:
                    os.close(r)
                os.dup2(fds[0][1], 1)
                os.dup2(fds[1][1], 2)
                os.close(fds[0][1])
                os.close(fds[1][1])
                ctrl_out, mode = fds[2][1], "run"
                os.chdir(run_dir)
                home = realpath(run_dir)
                break
            for r, w in fds:
                os.close(w)
            try:
                os.setpgid(pid, pid)  # the child does it too: whichever runs first
            except OSError:
                pass
            out_fd, err_fd, rep_fd = fds[0][0], fds[1][0], fds[2][0]
            kept, sizes, live = {out_fd: [], rep_fd: []}, {out_fd: 0, err_fd: 0, rep_fd: 0}, [out_fd, err_fd, rep_fd]
            overflow = timed_out = False
            while live and not overflow:
                left = started + wall - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                for fd in select.select(live, [], [], left)[0]:
                    chunk = _read(fd, 1 << 16)
                    if not chunk:
                        live.remove(fd)
                        continue
                    sizes[fd] += _len(chunk)
                    if fd in kept and sizes[fd] <= (4 << 20):
                        kept[fd].append(chunk)
                    overflow = overflow or sizes[out_fd] + sizes[err_fd] > cap
            for fd in (out_fd, err_fd, rep_fd):
                os.close(fd)
            try:
                os.killpg(pid, signal.SIGKILL)  # the child's group: anything it left behind goes with it
            except OSError:
                pass
            status = os.waitpid(pid, 0)[1]
            seconds = time.monotonic() - started
            rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            retire = False
            for entry in os.listdir(home):  # the next request starts from an empty directory
                path = join(home, entry)
                try:
                    if os.path.isdir(path) and not os.path.islink(path):
                        shutil.rmtree(path)
                    else:
                        os.unlink(path)
                except BaseException:
                    retire = True  # left behind: this process goes, its supervisor removes its directory
            out, reports = b"".join(kept[out_fd])[:cap], b"".join(kept[rep_fd])
            report("RESULT", _repr((rc, out, reports, overflow, timed_out, seconds, retire)))
            if retire:
                _exit(0)
    try:
        code = _compile(program, "<program>", "exec")
    except SyntaxError as e:
        report("CRASH", "SyntaxError: " + _str(e))
        _exit(0)
    del bundle, program
    if hook_on:
        sys.addaudithook(hook)
    report("STARTED", "")  # from here on the program runs: a SETUP line after this one is the program's forgery
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    def flush():  # what the program printed before it ended, crash or not, reaches the supervisor
        try:
            sys.stdout.flush()
        except BaseException:
            pass
    try:
        _exec(code, namespace)
    except SystemExit as e:
        if e.code not in (None, 0):
            flush()
            report("CRASH", "SystemExit " + _repr(e.code))
            _exit(0)
    except BaseException as e:
        flush()
        report("CRASH", _type(e).__name__ + ": " + _str(e))
        _exit(0)
    flush()
    if mode == "run":
        report("DONE", "")
        _exit(0)
    names = []
    for name, v in _list(namespace.items()):
        if name.startswith("__"):
            continue
        if _type(v) is _type(sys):
            names.append((name, ("module", _str(v.__name__))))
            continue
        try:
            names.append((name, ("value", encode(v))))
        except (TypeError, ValueError):
            names.append((name, ("object", _str(_type(v).__name__))))
    report("READY", _repr(names))
    while True:
        line = readline()
        if not line:
            break
        op, target, payload = literal(line.decode())
        if op == "end":
            break
        try:
            obj = resolve(target)
            if op == "call":
                result = obj(*decode(payload[0]), **decode(payload[1]))
            elif op == "getattr":
                result = _getattr(obj, payload)
            elif op == "iter":
                result = _iter(obj)
            elif op == "next":
                try:
                    result = _next(obj)
                except _StopIteration:
                    report("STOP", "")
                    continue
            elif op == "len":
                result = _len(obj)
            elif op == "getitem":
                result = obj[decode(payload)]
            elif op == "contains":
                result = decode(payload) in obj
            elif op == "bool":
                result = _bool(obj)
            else:
                raise TypeError("unknown request " + _repr(op))
            answer(result)
        except _BaseException as e:
            try:
                why = _str(e)[:2000]
            except _BaseException:
                why = ""
            report("RAISE", _repr((_str(_type(e).__name__), why)))
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    _exit(0)
_main()
"""
