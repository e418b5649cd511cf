// Package container_test builds the leasehold image with build.sh (buildah,
// FROM scratch, offline) and checks what is in it and how it runs.
package container_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testenv"
)

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
}

// blob reads a blob of the OCI image layout at dir.
func blob(t *testing.T, dir string, d descriptor) []byte {
	t.Helper()
	algo, hex, ok := strings.Cut(d.Digest, ":")
	if !ok {
		t.Fatalf("bad digest %q", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", algo, hex))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestImage(t *testing.T) {
	if _, err := exec.LookPath("buildah"); err != nil {
		testenv.Missing(t, "buildah (the daemonless image builder)", "apt-get install -y buildah")
	}
	tmp := t.TempDir()
	oci := filepath.Join(tmp, "oci")
	global := []string{"--storage-driver", "vfs", "--root", filepath.Join(tmp, "root"), "--runroot", filepath.Join(tmp, "runroot")}
	const tag = "leasehold:test"
	build := exec.Command("./build.sh", tag)
	build.Env = append(os.Environ(), "BUILDAH_ARGS="+strings.Join(global, " "), "LEASEHOLD_IMAGE_OCI="+oci)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() { // buildah's own files, some of them read-only
		exec.Command("buildah", append(global, "rm", "--all")...).Run()
		exec.Command("buildah", append(global, "rmi", "--all", "--force")...).Run()
	})

	// The OCI layout: one manifest, one layer, a non-root user.
	var index struct{ Manifests []descriptor }
	b, err := os.ReadFile(filepath.Join(oci, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, b)
	}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	if err := json.Unmarshal(blob(t, oci, index.Manifests[0]), &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Layers) != 1 {
		t.Errorf("%d layers, want 1 (FROM scratch, no base)", len(manifest.Layers))
	}
	var config struct {
		Config struct {
			User       string
			Entrypoint []string
		} `json:"config"`
	}
	if err := json.Unmarshal(blob(t, oci, manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	if config.Config.User != "65532:65532" || strings.Join(config.Config.Entrypoint, " ") != "/usr/local/bin/leasehold" {
		t.Errorf("image config: user %q entrypoint %q", config.Config.User, config.Config.Entrypoint)
	}

	// The layer: exactly the binary, the CA bundle, passwd and group.
	files := map[string][]byte{}
	modes := map[string]int64{}
	for _, l := range manifest.Layers {
		var r io.Reader = bytes.NewReader(blob(t, oci, l))
		if strings.HasSuffix(l.MediaType, "+gzip") {
			if r, err = gzip.NewReader(r); err != nil {
				t.Fatal(err)
			}
		}
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				data, _ := io.ReadAll(tr)
				files[strings.TrimPrefix(h.Name, "./")] = data
				modes[strings.TrimPrefix(h.Name, "./")] = h.Mode
			}
		}
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	if len(files) != 4 {
		t.Errorf("files in the image: %v, want the binary, the CA bundle, passwd and group", names)
	}
	host, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files["etc/ssl/certs/ca-certificates.crt"], host) {
		t.Errorf("the image's CA bundle is not the host's (%d bytes)", len(files["etc/ssl/certs/ca-certificates.crt"]))
	}
	if !strings.Contains(string(files["etc/passwd"]), "leasehold:x:65532:65532:") {
		t.Errorf("etc/passwd has no user 65532:\n%s", files["etc/passwd"])
	}
	bin := filepath.Join(tmp, "leasehold")
	if err := os.WriteFile(bin, files["usr/local/bin/leasehold"], 0o755); err != nil {
		t.Fatal(err)
	}
	if modes["usr/local/bin/leasehold"]&0o111 == 0 {
		t.Errorf("the binary's mode %o is not executable", modes["usr/local/bin/leasehold"])
	}
	if interp := interpreter(t, bin); interp != "" {
		t.Errorf("the binary is dynamically linked (interpreter %s): scratch has no libc", interp)
	}
	// Negative control: the static check catches a dynamically linked binary.
	if sh, _ := exec.LookPath("sh"); sh != "" && interpreter(t, sh) == "" {
		t.Errorf("interpreter() finds no interpreter in %s", sh)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "github.com/leasehold/leasehold") {
		t.Errorf("the layer's binary --version: %v\n%s", err, out)
	}

	// Run in the image (buildah's chroot isolation): as the image's user,
	// which cannot write to /, and as root, which can (the control).
	ctr, err := exec.Command("buildah", append(global, "from", "localhost/"+tag)...).Output()
	if err != nil {
		t.Fatalf("buildah from: %v", err)
	}
	run := func(args ...string) (string, error) {
		a := append(append(global, "run", "--isolation", "chroot"), args[:len(args)-1]...)
		a = append(a, strings.TrimSpace(string(ctr)), "--")
		a = append(a, strings.Fields(args[len(args)-1])...)
		out, err := exec.Command("buildah", a...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("/usr/local/bin/leasehold --version"); err != nil || !strings.Contains(out, "leasehold devel") && !strings.Contains(out, "leasehold v") {
		t.Errorf("leasehold --version in the image: %v\n%s", err, out)
	}
	if out, err := run("/usr/local/bin/leasehold migrate --store sqlite:///leases.db"); err == nil || !strings.Contains(out, "permission denied") {
		t.Errorf("as the image's user, writing to / should be refused: %v\n%s", err, out)
	}
	if out, err := run("--user", "0:0", "/usr/local/bin/leasehold migrate --store sqlite:///leases.db"); err != nil {
		t.Errorf("as root (the control), writing to / should work: %v\n%s", err, out)
	}
	// The init container of deploy/kubernetes/deployment.yaml: the binary
	// copies itself into a shared volume (the image has no cp).
	vol := filepath.Join(tmp, "leasehold-bin")
	if err := os.Mkdir(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(vol, 0o777) // an emptyDir is writable by the pod's user
	if out, err := run("-v", vol+":/leasehold-bin", "/usr/local/bin/leasehold install /leasehold-bin"); err != nil {
		t.Errorf("leasehold install in the image: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(vol, "leasehold"), "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), "github.com/leasehold/leasehold") {
		t.Errorf("the binary the image installed: %v\n%s", err, out)
	}
}

// interpreter returns the ELF program interpreter of path ("" when static).
func interpreter(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}
