// Package zktest starts real ZooKeeper servers on loopback for tests: one
// standalone server, or an ensemble of several members whose peer traffic
// (the quorum and election connections) passes through fault proxies, so a
// test can cut a member off from the others. Each server runs ZooKeeper's
// own Java main class (org.apache.zookeeper.server.quorum.QuorumPeerMain)
// from the installed jars, with a zoo.cfg written to a temporary directory,
// on free loopback ports, with the admin server off; it is killed by its PID
// when stopped.
//
// The jars come from Debian's zookeeper package (/usr/share/java/zookeeper.jar,
// whose manifest names the jars it needs), or from the class path in
// $LEASEHOLD_ZOOKEEPER_CLASSPATH. Java is $JAVA_HOME/bin/java or java on
// the PATH.
package zktest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/faultproxy"
	"github.com/leasehold/leasehold/internal/freeport"
)

// EnvClasspath overrides where the ZooKeeper server's jars are found.
const EnvClasspath = "LEASEHOLD_ZOOKEEPER_CLASSPATH"

// DebianJar is the server jar of Debian's zookeeper package.
const DebianJar = "/usr/share/java/zookeeper.jar"

// HowToInstall says how to get what the tests need, for skip messages.
const HowToInstall = "install Debian's zookeeper package (apt-get install zookeeper; it brings a Java runtime), or set " + EnvClasspath + " to the server's class path"

// debianLogBinding makes ZooKeeper's log go to the server's stderr (its
// server.log here), so that a failed test can show what a member did.
const debianLogBinding = "/usr/share/java/slf4j-simple.jar"

// ErrNotInstalled is wrapped by Find when Java or the jars are missing.
var ErrNotInstalled = errors.New("zktest: ZooKeeper server not installed")

// Find returns the java binary and the class path of the ZooKeeper server,
// or an error wrapping ErrNotInstalled.
func Find() (java, classpath string, err error) {
	classpath = os.Getenv(EnvClasspath)
	if classpath == "" {
		if _, err := os.Stat(DebianJar); err != nil {
			return "", "", fmt.Errorf("%w: no %s and %s is unset", ErrNotInstalled, DebianJar, EnvClasspath)
		}
		classpath = DebianJar
		// Without a logging binding ZooKeeper logs nothing; Debian's
		// libslf4j-java, which the package depends on, has the simple one.
		if _, err := os.Stat(debianLogBinding); err == nil {
			classpath += string(os.PathListSeparator) + debianLogBinding
		}
	}
	java = "java"
	if home := os.Getenv("JAVA_HOME"); home != "" {
		java = filepath.Join(home, "bin", "java")
	}
	p, err := exec.LookPath(java)
	if err != nil {
		return "", "", fmt.Errorf("%w: no Java runtime (%v)", ErrNotInstalled, err)
	}
	return p, classpath, nil
}

// Options are the server settings a test may choose.
type Options struct {
	// Dir is where the servers keep their configuration, data and logs.
	// Required (a test's t.TempDir()).
	Dir string
	// TickTime is ZooKeeper's tick; the shortest session it grants is two
	// ticks. Zero: 100 ms, so that tests can use sub-second sessions.
	TickTime time.Duration
	// MaxSessionTimeout is the longest session the server grants. Zero:
	// 2 minutes (ZooKeeper's own default is 20 ticks).
	MaxSessionTimeout time.Duration
	// Extra lines for zoo.cfg.
	Extra []string
}

func (o Options) withDefaults() Options {
	if o.TickTime == 0 {
		o.TickTime = 100 * time.Millisecond
	}
	if o.MaxSessionTimeout == 0 {
		o.MaxSessionTimeout = 2 * time.Minute
	}
	return o
}

// Server is one ZooKeeper server process.
type Server struct {
	// ID is the member's id (myid) in an ensemble, 0 for a standalone server.
	ID         int
	ClientPort int
	dir        string
	java, cp   string

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has been waited for
	log  *os.File
}

// Addr is the server's client address, 127.0.0.1:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.ClientPort)) }

// Dir is the server's directory (zoo.cfg, data, log).
func (s *Server) Dir() string { return s.dir }

func baseConfig(o Options, dataDir string, clientPort int) []string {
	return append([]string{
		fmt.Sprintf("tickTime=%d", o.TickTime.Milliseconds()),
		"dataDir=" + dataDir,
		fmt.Sprintf("clientPort=%d", clientPort),
		"clientPortAddress=127.0.0.1",
		fmt.Sprintf("maxSessionTimeout=%d", o.MaxSessionTimeout.Milliseconds()),
		"maxClientCnxns=0",
		"admin.enableServer=false",
		"4lw.commands.whitelist=srvr,ruok,mntr,conf",
		"preAllocSize=1024",
		// The tests kill servers, not hosts: what a killed process wrote is
		// in the page cache, so skipping fsync loses nothing they test.
		"forceSync=no",
		"autopurge.purgeInterval=0",
	}, o.Extra...)
}

// StartServer starts a standalone server in o.Dir and waits until it serves.
func StartServer(o Options) (*Server, error) {
	o = o.withDefaults()
	if o.Dir == "" {
		return nil, errors.New("zktest: Options.Dir is required")
	}
	java, cp, err := Find()
	if err != nil {
		return nil, err
	}
	port, err := freeport.One()
	if err != nil {
		return nil, err
	}
	s := &Server{ClientPort: port, dir: o.Dir, java: java, cp: cp}
	data := filepath.Join(o.Dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	if err := writeConfig(filepath.Join(o.Dir, "zoo.cfg"), baseConfig(o, data, port)); err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	if err := s.WaitServing(60 * time.Second); err != nil {
		s.Kill()
		return nil, err
	}
	return s, nil
}

func writeConfig(path string, lines []string) error {
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// Start starts the server process (again, after Kill: on the same data and
// ports). It does not wait for it to serve.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.runningLocked() {
		return fmt.Errorf("zktest: server %s is already running", s.Addr())
	}
	log, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.java,
		"-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k",
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.jmx.log4j.disable=true",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
		// Not a line for each of the harness's srvr polls.
		"-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=warn",
		"-cp", s.cp,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(s.dir, "zoo.cfg"))
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("zktest: start %s: %w", s.java, err)
	}
	exit := make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(exit)
	}()
	s.cmd, s.exit, s.log = cmd, exit, log
	return nil
}

// PID is the server's process id, 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Running reports whether the server process runs: started, not killed,
// and not exited of its own accord.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil && s.runningLocked()
}

func (s *Server) runningLocked() bool {
	select {
	case <-s.exit:
		return false
	default:
		return true
	}
}

// exited reports whether the server was started and its process ended
// without Kill: ZooKeeper exits when it cannot bind a port, for one.
func (s *Server) exited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil && !s.runningLocked()
}

// Kill kills the server process (SIGKILL, by its PID) and waits for it to
// exit. Its data stays for a later Start. Killing a stopped server does
// nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exit := s.cmd, s.exit
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-exit
}

// Command sends a four-letter-word command (srvr, ruok, mntr, conf) and
// returns the answer.
func (s *Server) Command(word string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, word); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// Mode is the server's mode as srvr reports it: "standalone", "leader",
// "follower", or "" when it does not serve.
func (s *Server) Mode() string {
	out, err := s.Command("srvr")
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

// WaitServing polls the server until it serves clients (srvr reports a
// mode), or fails after d, or at once if the process exits.
func (s *Server) WaitServing(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if s.Mode() != "" {
			return nil
		}
		s.mu.Lock()
		exit := s.exit
		running := s.cmd != nil
		s.mu.Unlock()
		if !running {
			return fmt.Errorf("zktest: server %s is not running", s.Addr())
		}
		select {
		case <-exit:
			return fmt.Errorf("zktest: server %s exited while starting; its log: %s", s.Addr(), s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zktest: server %s not serving within %v; its log: %s", s.Addr(), d, s.logTail())
		}
		t := time.NewTimer(50 * time.Millisecond) // polling the server
		select {
		case <-t.C:
		case <-exit:
			t.Stop()
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath())
	if len(b) > 12000 {
		b = b[len(b)-12000:]
	}
	return string(b)
}

// logPath is the server's log file (its stdout and stderr).
func (s *Server) logPath() string { return filepath.Join(s.dir, "server.log") }

// logSize is how long the server's log is now (0 if it cannot be read).
func (s *Server) logSize() int64 {
	fi, err := os.Stat(s.logPath())
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logFrom is the server's log from byte off on.
func (s *Server) logFrom(off int64) string {
	b, _ := os.ReadFile(s.logPath())
	if off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}

// Ensemble is a ZooKeeper ensemble of several members on loopback. Every
// member reaches every other member's quorum and election ports through a
// fault proxy of its own (one per ordered pair of members and port), so
// Isolate can cut one member off from the others in both directions while
// its clients still reach it.
type Ensemble struct {
	Servers []*Server
	// proxies[i][j] are the quorum and election proxies member i uses to
	// reach member j.
	proxies [][][2]*faultproxy.Proxy
}

// StartEnsemble starts n members in subdirectories of o.Dir and waits until
// they have a leader and every member serves.
func StartEnsemble(n int, o Options) (_ *Ensemble, err error) {
	o = o.withDefaults()
	if o.Dir == "" {
		return nil, errors.New("zktest: Options.Dir is required")
	}
	if n < 1 {
		return nil, fmt.Errorf("zktest: an ensemble of %d members", n)
	}
	java, cp, err := Find()
	if err != nil {
		return nil, err
	}
	e := &Ensemble{}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()
	type ports struct{ client, quorum, election int }
	pp := make([]ports, n)
	picked, err := freeport.Pick(3 * n)
	if err != nil {
		return nil, err
	}
	for i := range pp {
		pp[i] = ports{picked[3*i], picked[3*i+1], picked[3*i+2]}
	}
	e.proxies = make([][][2]*faultproxy.Proxy, n)
	for i := 0; i < n; i++ {
		e.proxies[i] = make([][2]*faultproxy.Proxy, n)
		for j := 0; j < n; j++ {
			if i == j {
				continue
			}
			for k, port := range []int{pp[j].quorum, pp[j].election} {
				p, err := faultproxy.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
				if err != nil {
					return nil, err
				}
				e.proxies[i][j][k] = p
			}
		}
	}
	// A member that opens an election connection names its own election
	// address in its first message, and a peer with a higher id closes the
	// connection and calls back there: at the member's own port, past every
	// proxy. A cut then left those links up, the cut-off member kept winning
	// elections its followers could not reach it after, and a new leader
	// took from 1.5 s to over 60 s. So the message names the proxy by which
	// the peer reaches the member instead.
	for i := range e.proxies {
		for j := range e.proxies[i] {
			if i != j {
				e.proxies[i][j][1].RewriteHello(electionHello(e.proxies[j][i][1].Addr()))
			}
		}
	}
	for i := 0; i < n; i++ {
		id := i + 1
		dir := filepath.Join(o.Dir, fmt.Sprintf("member%d", id))
		data := filepath.Join(dir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(id)+"\n"), 0o644); err != nil {
			return nil, err
		}
		lines := baseConfig(o, data, pp[i].client)
		lines = append(lines, "initLimit=10", "syncLimit=5", "standaloneEnabled=false", "reconfigEnabled=false")
		for j := 0; j < n; j++ {
			// A member binds the ports of its own line; it reaches the
			// others through its own proxies.
			q, el := pp[j].quorum, pp[j].election
			if j != i {
				q = proxyPort(e.proxies[i][j][0])
				el = proxyPort(e.proxies[i][j][1])
			}
			lines = append(lines, fmt.Sprintf("server.%d=127.0.0.1:%d:%d;127.0.0.1:%d", j+1, q, el, pp[j].client))
		}
		if err := writeConfig(filepath.Join(dir, "zoo.cfg"), lines); err != nil {
			return nil, err
		}
		s := &Server{ID: id, ClientPort: pp[i].client, dir: dir, java: java, cp: cp}
		e.Servers = append(e.Servers, s)
	}
	for _, s := range e.Servers {
		if err := s.Start(); err != nil {
			return nil, err
		}
	}
	if _, err := e.WaitLeader(60*time.Second, nil); err != nil {
		return nil, err
	}
	return e, nil
}

// electionHello rewrites the first message of a ZooKeeper election
// connection (QuorumCnxManager's: a negative protocol version and the sender's
// id, 8 bytes each, then its election addresses as a string with a 4-byte
// length) to name via as the sender's address. A non-negative first number is
// the oldest protocol's id alone, which names no address.
func electionHello(via string) func(io.Reader) ([]byte, error) {
	return func(r io.Reader) ([]byte, error) {
		msg := make([]byte, 8, 24+len(via))
		if _, err := io.ReadFull(r, msg); err != nil {
			return nil, err
		}
		if int64(binary.BigEndian.Uint64(msg)) >= 0 {
			return msg, nil
		}
		var head [12]byte // the id and the address's length
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return nil, err
		}
		n := binary.BigEndian.Uint32(head[8:])
		if n > 4096 {
			return nil, fmt.Errorf("zktest: an election hello naming %d bytes of addresses", n)
		}
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			return nil, err
		}
		msg = append(msg, head[:8]...)
		msg = binary.BigEndian.AppendUint32(msg, uint32(len(via)))
		return append(msg, via...), nil
	}
}

func proxyPort(p *faultproxy.Proxy) int {
	_, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	return n
}

// Addrs are the client addresses of the members given by index (all
// members when none is given).
func (e *Ensemble) Addrs(idx ...int) []string {
	if len(idx) == 0 {
		for i := range e.Servers {
			idx = append(idx, i)
		}
	}
	var out []string
	for _, i := range idx {
		out = append(out, e.Servers[i].Addr())
	}
	return out
}

// settled is how long the running members must agree on one leader before
// WaitLeader returns it. A leader that has just been elected is still
// bringing its followers into sync, and a CI run saw an ensemble elect again
// within half a second of first agreeing: a fault injected in that window
// (TestEnsemble cut the leader off) left all three members serving nothing.
const settled = 500 * time.Millisecond

// WaitLeader polls the running members that are not in skip until exactly
// one says it leads and every other one follows, the same leader for
// settled, and returns the leader's index.
func (e *Ensemble) WaitLeader(d time.Duration, skip map[int]bool) (int, error) {
	deadline := time.Now().Add(d)
	agreed, since := -1, time.Time{}
	for {
		leader, ok := -1, true
		for i, s := range e.Servers {
			if skip[i] {
				continue
			}
			if s.exited() {
				return -1, fmt.Errorf("zktest: member %d (%s) exited; its log: %s", i, s.Addr(), s.logTail())
			}
			if !s.Running() {
				continue
			}
			switch s.Mode() {
			case "leader":
				if leader >= 0 {
					ok = false
				}
				leader = i
			case "follower":
			default:
				ok = false
			}
		}
		switch {
		case !ok || leader < 0:
			agreed = -1
		case leader != agreed:
			agreed, since = leader, time.Now()
		case time.Since(since) >= settled:
			return leader, nil
		}
		if time.Now().After(deadline) {
			var modes []string
			for i, s := range e.Servers {
				modes = append(modes, fmt.Sprintf("member %d: %q", i, s.Mode()))
			}
			return -1, fmt.Errorf("zktest: no agreed leader within %v (%s)", d, strings.Join(modes, ", "))
		}
		time.Sleep(50 * time.Millisecond) // polling the servers' state
	}
}

// Isolate cuts member i off from every other member, both ways: its quorum
// and election connections go silent (as in a network partition), while its
// clients still reach it.
func (e *Ensemble) Isolate(i int) {
	for j := range e.Servers {
		if j == i {
			continue
		}
		for k := 0; k < 2; k++ {
			e.proxies[i][j][k].Blackhole()
			e.proxies[j][i][k].Blackhole()
		}
	}
}

// Heal ends every cut.
func (e *Ensemble) Heal() {
	for i := range e.proxies {
		for j := range e.proxies[i] {
			for k := 0; k < 2; k++ {
				if p := e.proxies[i][j][k]; p != nil {
					p.Heal()
				}
			}
		}
	}
}

// Stop kills every member and closes the proxies.
func (e *Ensemble) Stop() {
	for _, s := range e.Servers {
		s.Kill()
	}
	for i := range e.proxies {
		for j := range e.proxies[i] {
			for k := 0; k < 2; k++ {
				if p := e.proxies[i][j][k]; p != nil {
					p.Close()
				}
			}
		}
	}
}
