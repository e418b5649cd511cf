package zookeeper

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasehold/leasehold/store"
)

func openAs(t *testing.T, root, user, password string) *Store {
	t.Helper()
	st, err := Open(testCtx(t, 20*time.Second), Config{Servers: []string{shared(t).Addr()}, Root: root, Username: user, Password: password})
	if err != nil {
		t.Fatalf("Open as %q: %v", user, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestDigestACL: with digest credentials, the nodes the store creates are
// its user's alone. The same credentials on another handle share the lease;
// no credentials, or another user's, are refused by ZooKeeper, and the error
// says what to check.
func TestDigestACL(t *testing.T) {
	root := uniqueRoot("digest")
	a := openAs(t, root, "lh", "s3cret")
	ctx := testCtx(t, 30*time.Second)
	held, err := a.Acquire(ctx, "job", "a", 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	conn := rawConn(t)
	owner := rawConn(t)
	if err := owner.AddAuth("digest", []byte("lh:s3cret")); err != nil {
		t.Fatal(err)
	}
	acl, _, err := owner.GetACL(a.Path("job")) // getACL needs READ
	if err != nil {
		t.Fatal(err)
	}
	want := zk.DigestACL(zk.PermAll, "lh", "s3cret")
	if len(acl) != 1 || acl[0] != want[0] {
		t.Fatalf("the lease path's ACL is %+v, want %+v (all permissions for the store's user only)", acl, want)
	}
	names := contenderNames(t, owner, a.Path("job"))
	if len(names) != 1 {
		t.Fatalf("contenders %v, want one", names)
	}
	if _, _, err := conn.Get(a.Path("job") + "/" + names[0]); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("reading the term's node without credentials: %v, want zk.ErrNoAuth", err)
	}
	if err := conn.Delete(a.Path("job")+"/"+names[0], -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("deleting the term's node without credentials: %v, want zk.ErrNoAuth", err)
	}

	same := openAs(t, root, "lh", "s3cret")
	if r, err := same.Get(ctx, "job"); err != nil || r.Term != held.Term {
		t.Fatalf("Get with the same credentials = %+v, %v; want the term", r, err)
	}
	if _, err := same.Acquire(ctx, "job", "b", 10*time.Second, ""); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("Acquire with the same credentials: %v, want ErrHeld", err)
	}

	for _, c := range []struct{ what, user, password string }{
		{"no credentials", "", ""},
		{"another password", "lh", "wrong"},
		{"another user", "mallory", "s3cret"},
	} {
		t.Run(c.what, func(t *testing.T) {
			st := openAs(t, root, c.user, c.password)
			_, err := st.Acquire(ctx, "job", "c", 10*time.Second, "")
			if !errors.Is(err, zk.ErrNoAuth) || !strings.Contains(err.Error(), "ACL") {
				t.Fatalf("Acquire: %v, want zk.ErrNoAuth with a word on ACLs", err)
			}
			if errors.Is(err, store.ErrHeld) || errors.Is(err, store.ErrInvalid) {
				t.Fatalf("Acquire: %v: a permission error is neither held nor bad input", err)
			}
			if _, err := st.Get(ctx, "job"); !errors.Is(err, zk.ErrNoAuth) {
				t.Fatalf("Get: %v, want zk.ErrNoAuth", err)
			}
			if err := st.Release(ctx, held.Term); !errors.Is(err, zk.ErrNoAuth) {
				t.Fatalf("Release of the term: %v, want zk.ErrNoAuth", err)
			}
		})
	}
	if r, err := same.Get(ctx, "job"); err != nil || r.Term != held.Term || !r.Live() {
		t.Fatalf("after the refused attempts Get = %+v, %v; want the term untouched", r, err)
	}
	if err := a.Release(ctx, held.Term); err != nil {
		t.Fatal(err)
	}
}

// TestPathWithoutPermission: a root an operator made read-only: Open
// succeeds (it only reads), Acquire is refused by ZooKeeper with an error
// that names ACLs, and nothing is created.
func TestPathWithoutPermission(t *testing.T) {
	root := uniqueRoot("readonly")
	conn := rawConn(t)
	if err := ensurePathRaw(conn, root, zk.WorldACL(zk.PermRead)); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, root)
	ctx := testCtx(t, 20*time.Second)
	_, err := st.Acquire(ctx, "job", "a", 10*time.Second, "")
	if !errors.Is(err, zk.ErrNoAuth) || !strings.Contains(err.Error(), "ACL") || !strings.Contains(err.Error(), root) {
		t.Fatalf("Acquire under a read-only root: %v, want zk.ErrNoAuth naming the path and ACLs", err)
	}
	if kids, _, err := conn.Children(root); err != nil || len(kids) != 0 {
		t.Fatalf("children of the read-only root: %v, %v; want none", kids, err)
	}
	if _, err := st.Get(ctx, "job"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get: %v, want ErrNotFound", err)
	}
	// A root without READ (CREATE only): the lease's own path is the
	// store's, so leases work, but List, which reads the root, is refused.
	noread := uniqueRoot("noread")
	if err := ensurePathRaw(conn, noread, zk.WorldACL(zk.PermCreate)); err != nil {
		t.Fatal(err)
	}
	st2 := openStore(t, noread)
	if _, err := st2.Acquire(ctx, "job", "a", 10*time.Second, ""); err != nil {
		t.Fatalf("Acquire under a root with CREATE only: %v", err)
	}
	if _, err := st2.List(ctx); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("List under a root without READ: %v, want zk.ErrNoAuth", err)
	}
}

// TestLeastPermissions: what the package documentation says a leasehold
// user needs is enough. An operator makes the lease's path with READ,
// CREATE, DELETE and WRITE for the leasehold user (no ADMIN), under a root
// the user may only READ; every operation works, and without any one of the
// four something fails (the negative controls).
func TestLeastPermissions(t *testing.T) {
	leastPerms := int32(zk.PermRead | zk.PermCreate | zk.PermDelete | zk.PermWrite)
	run := func(t *testing.T, perms int32) error {
		// The operator ("admin") makes the root, which the leasehold user
		// ("lh") may only read, and the lease's path.
		root := uniqueRoot("least")
		conn := rawConn(t)
		if err := conn.AddAuth("digest", []byte("admin:apw")); err != nil {
			t.Fatal(err)
		}
		admin := zk.DigestACL(zk.PermAll, "admin", "apw")
		if err := ensurePathRaw(conn, root, append(zk.DigestACL(zk.PermRead, "lh", "pw"), admin...)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Create(root+"/job", nil, zk.FlagPersistent, append(zk.DigestACL(perms, "lh", "pw"), admin...)); err != nil {
			t.Fatal(err)
		}
		st := openAs(t, root, "lh", "pw")
		other := openAs(t, root, "lh", "pw")
		ctx := testCtx(t, 20*time.Second)
		held, err := st.Acquire(ctx, "job", "a", 10*time.Second, "")
		if err != nil {
			return err
		}
		if _, err := st.Renew(ctx, held.Term, 10*time.Second); err != nil {
			return err
		}
		if _, err := other.Acquire(ctx, "job", "b", 10*time.Second, ""); !errors.Is(err, store.ErrHeld) {
			return err
		}
		w, err := other.Watch(ctx, "job")
		if err != nil {
			return err
		}
		if err := st.Release(ctx, held.Term); err != nil {
			return err
		}
		select {
		case <-w:
		case <-time.After(10 * time.Second):
			return errors.New("no wake-up on release")
		}
		if l, err := other.List(ctx); err != nil || len(l) != 1 {
			return errors.Join(err, errors.New("List did not list the lease"))
		}
		if _, err := other.Acquire(ctx, "job", "b", 10*time.Second, ""); err != nil {
			return err
		}
		if _, err := st.ForceRelease(ctx, "job"); err != nil {
			return err
		}
		return nil
	}
	if err := run(t, leastPerms); err != nil {
		t.Fatalf("with READ, CREATE, DELETE and WRITE on the lease's path: %v", err)
	}
	for _, drop := range []struct {
		name string
		perm int32
	}{{"READ", zk.PermRead}, {"CREATE", zk.PermCreate}, {"DELETE", zk.PermDelete}, {"WRITE", zk.PermWrite}} {
		t.Run("without "+drop.name, func(t *testing.T) {
			err := run(t, leastPerms&^drop.perm)
			if err == nil {
				t.Fatalf("everything worked without %s on the lease's path: the documentation overstates what is needed", drop.name)
			}
			t.Logf("without %s: %v", drop.name, err)
		})
	}
}

// ensurePathRaw creates p and the paths above it, p itself with acl.
func ensurePathRaw(c *zk.Conn, p string, acl []zk.ACL) error {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := ""
	for i, part := range parts {
		cur += "/" + part
		a := zk.WorldACL(zk.PermAll)
		if i == len(parts)-1 {
			a = acl
		}
		if _, err := c.Create(cur, nil, zk.FlagPersistent, a); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// TestOpenUnreachable: servers that do not answer fail Open within its
// dial timeout, with an error that names them; so does a server that is
// not ZooKeeper.
func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	start := time.Now()
	_, err = Open(context.Background(), Config{Servers: []string{dead}, DialTimeout: time.Second})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), dead) {
		t.Fatalf("Open with nothing listening: %v, want ErrUnreachable naming %s", err, dead)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open took %v with a 1s dial timeout", d)
	}
	// A server that accepts and says nothing.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start = time.Now()
	_, err = Open(context.Background(), Config{Servers: []string{silent.Addr().String()}, DialTimeout: time.Second})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Open against a silent server: %v, want ErrUnreachable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open took %v with a 1s dial timeout", d)
	}
	// A cancelled context is reported as such.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Open(ctx, Config{Servers: []string{shared(t).Addr()}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled context: %v, want context.Canceled", err)
	}
	// One member down of two: Open works through the other.
	st, err := Open(testCtx(t, 20*time.Second), Config{Servers: []string{dead, shared(t).Addr()}, Root: uniqueRoot("half")})
	if err != nil {
		t.Fatalf("Open with one of two servers down: %v", err)
	}
	st.Close()
}

// TestOpenBadConfig: bad configuration is ErrInvalid, naming what is wrong.
func TestOpenBadConfig(t *testing.T) {
	srv := []string{"127.0.0.1:1"}
	for _, c := range []struct {
		what string
		cfg  Config
		want string
	}{
		{"no servers", Config{}, "no servers"},
		{"server without a port", Config{Servers: []string{"127.0.0.1"}}, "not host:port"},
		{"server list in one string", Config{Servers: []string{"a:1,b:2"}}, "not host:port"},
		{"user without password", Config{Servers: srv, Username: "u"}, "password"},
		{"password without user", Config{Servers: srv, Password: "p"}, "username"},
		{"user with a colon", Config{Servers: srv, Username: "u:x", Password: "p"}, "':'"},
		{"relative root", Config{Servers: srv, Root: "leases"}, "does not start with '/'"},
		{"root with an empty part", Config{Servers: srv, Root: "/a//b"}, "empty"},
		{"root with ..", Config{Servers: srv, Root: "/a/../b"}, "'..'"},
	} {
		_, err := Open(context.Background(), c.cfg)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", c.what, err, c.want)
		}
	}
}

// TestURL: the URL form, and bad URLs refused naming what is wrong, never
// showing the password.
func TestURL(t *testing.T) {
	parse := func(raw string) (Config, error) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return ConfigFromURL(u)
	}
	cfg, err := parse("zookeeper://zk1,zk2:2182,zk3:2181/services/locks?dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Servers, " ") != "zk1:2181 zk2:2182 zk3:2181" || cfg.Root != "/services/locks" || cfg.DialTimeout != 2*time.Second || cfg.ACL != nil {
		t.Fatalf("config %+v", cfg)
	}
	cfg, err = parse("zookeeper://lh:pa%24%24@127.0.0.1:2181/")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Username != "lh" || cfg.Password != "pa$$" || cfg.Root != "/" {
		t.Fatalf("config %+v", cfg)
	}
	cfg, err = parse("zookeeper://lh:pw@h:1?acl=creator")
	if err != nil || cfg.ACL[0] != zk.AuthACL(zk.PermAll)[0] || cfg.Root != "" {
		t.Fatalf("acl=creator: %+v, %v", cfg, err)
	}
	cfg, err = parse("zookeeper://lh:pw@h:1?acl=open")
	if err != nil || cfg.ACL[0] != zk.WorldACL(zk.PermAll)[0] {
		t.Fatalf("acl=open: %+v, %v", cfg, err)
	}
	for _, c := range []struct{ raw, want string }{
		{"zookeeper://h:1/x?bogus=1", `unknown URL parameter "bogus"`},
		{"zookeeper://h:1/x?acl=everyone", "want one of creator, open"},
		{"zookeeper://h:1/x?acl=creator", "acl=creator needs credentials"},
		{"zookeeper://h:1/x?dial_timeout=soon", "dial_timeout"},
		{"zookeeper://lh@h:1/x", "needs both a user and a password"},
		{"zookeeper:///x", "want zookeeper://host:2181"},
		{"etcd://h:1/x", "not zookeeper"},
	} {
		_, err := parse(c.raw)
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", c.raw, err, c.want)
		}
	}
	// The password never shows, in a refusal or in a failure to connect.
	u, _ := url.Parse("zookeeper://lh:hunter2@127.0.0.1:1/x?bogus=1")
	if _, err := OpenURL(context.Background(), u); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("OpenURL with a bad parameter: %v (must fail, without the password)", err)
	}
	u, _ = url.Parse("zookeeper://lh:hunter2@127.0.0.1:1/x?dial_timeout=500ms")
	if _, err := OpenURL(context.Background(), u); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("OpenURL of an unreachable server: %v (must fail, without the password)", err)
	}
}
