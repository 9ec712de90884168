// helm-render renders a Helm 3 chart the way `helm template` does, for tests
// on machines without a helm binary. It follows Helm 3's engine
// (pkg/engine, pkg/chartutil) closely enough that a chart which renders here
// renders under Helm:
//
//   - text/template with sprig's TxtFuncMap minus env/expandenv, plus Helm's
//     toYaml, fromYaml, fromYamlArray, toJson, fromJson, fromJsonArray,
//     include, tpl, required and lookup (always an empty map, as with
//     `helm template`); toToml is absent (a chart using it fails to parse);
//   - missingkey=zero, and "<no value>" removed from the output;
//   - .Values: values.yaml deep-merged with every -f file, then every --set
//     (a null removes a key, as Helm's coalescing does); numbers are float64
//     because values go through YAML->JSON (sigs.k8s.io/yaml, here its
//     origin github.com/ghodss/yaml);
//   - .Release (Name, Namespace, Service "Helm", IsInstall, IsUpgrade,
//     Revision), .Chart (Chart.yaml with Helm's capitalised field names; an
//     unknown field is an error, as for Helm's chart.Metadata), .Capabilities
//     (KubeVersion, APIVersions.Has, HelmVersion), .Files (every chart file
//     outside templates/ and except Chart.yaml/values.yaml, minus
//     .helmignore's top-level patterns; Get, GetBytes, Glob, Lines, AsConfig,
//     AsSecrets), .Template (Name, BasePath);
//   - templates/_* partials are parsed but not emitted; NOTES.txt is
//     rendered only with --notes; a document holding only whitespace or
//     comments is dropped.
//
// Output: like `helm template` — "---\n# Source: <chart>/templates/<file>\n"
// before each document, templates in file-name order; --include-crds puts the
// files in crds/ first. Errors go to stderr with exit code 1 (bad usage: 2).
//
// Usage:
//
//	helm-render [--name R] [--namespace NS] [-f values.yaml]... [--set k=v[,k=v]]...
//	            [--api-versions group/version]... [--kube-version v1.30.0]
//	            [--include-crds] [--notes] CHART_DIR
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"github.com/ghodss/yaml"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// ---- Chart metadata, as Helm's chart.Metadata -------------------------------

type Maintainer struct {
	Name  string `json:"name,omitempty"`
	Email string `json:"email,omitempty"`
	URL   string `json:"url,omitempty"`
}

type Dependency struct {
	Name         string        `json:"name"`
	Version      string        `json:"version,omitempty"`
	Repository   string        `json:"repository"`
	Condition    string        `json:"condition,omitempty"`
	Tags         []string      `json:"tags,omitempty"`
	Enabled      bool          `json:"enabled,omitempty"`
	ImportValues []interface{} `json:"import-values,omitempty"`
	Alias        string        `json:"alias,omitempty"`
}

type Metadata struct {
	Name         string            `json:"name,omitempty"`
	Home         string            `json:"home,omitempty"`
	Sources      []string          `json:"sources,omitempty"`
	Version      string            `json:"version,omitempty"`
	Description  string            `json:"description,omitempty"`
	Keywords     []string          `json:"keywords,omitempty"`
	Maintainers  []*Maintainer     `json:"maintainers,omitempty"`
	Icon         string            `json:"icon,omitempty"`
	APIVersion   string            `json:"apiVersion,omitempty"`
	Condition    string            `json:"condition,omitempty"`
	Tags         string            `json:"tags,omitempty"`
	AppVersion   string            `json:"appVersion,omitempty"`
	Deprecated   bool              `json:"deprecated,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	KubeVersion  string            `json:"kubeVersion,omitempty"`
	Dependencies []*Dependency     `json:"dependencies,omitempty"`
	Type         string            `json:"type,omitempty"`
}

// ---- .Release, as Helm's engine passes it (a struct: unknown fields fail) ---

type Release struct {
	Name, Namespace      string
	IsUpgrade, IsInstall bool
	Revision             int
	Service              string
}

// ---- .Capabilities ----------------------------------------------------------

type KubeVersion struct {
	Version, Major, Minor string
}

func (kv KubeVersion) String() string     { return kv.Version }
func (kv KubeVersion) GitVersion() string { return kv.Version }

type VersionSet []string

// Has is true for "group/version" and for "group/version/Kind" entries.
func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

type HelmVersion struct {
	Version, GitCommit, GitTreeState, GoVersion string
}

type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
	HelmVersion HelmVersion
}

// The built-in group/versions of a v1.30 API server (what `helm template`
// assumes without a cluster: client-go's scheme).
var defaultAPIVersions = []string{
	"v1", "admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1", "apiregistration.k8s.io/v1",
	"apps/v1", "authentication.k8s.io/v1", "authorization.k8s.io/v1", "autoscaling/v1", "autoscaling/v2",
	"batch/v1", "certificates.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1", "events.k8s.io/v1",
	"flowcontrol.apiserver.k8s.io/v1", "networking.k8s.io/v1", "node.k8s.io/v1", "policy/v1",
	"rbac.authorization.k8s.io/v1", "scheduling.k8s.io/v1", "storage.k8s.io/v1",
}

// ---- .Files, as Helm's engine.files ----------------------------------------

type Files map[string][]byte

func (f Files) GetBytes(name string) []byte { return f[name] }
func (f Files) Get(name string) string      { return string(f.GetBytes(name)) }

// Glob matches with '/' as the separator and "**" across directories (Helm
// uses gobwas/glob with the same rules).
func (f Files) Glob(pattern string) Files {
	re, err := globRegexp(pattern)
	nf := Files{}
	if err != nil {
		return nf
	}
	for name, contents := range f {
		if re.MatchString(name) {
			nf[name] = contents
		}
	}
	return nf
}

func (f Files) AsConfig() string {
	if len(f) == 0 {
		return ""
	}
	m := map[string]string{}
	for k, v := range f {
		m[path.Base(k)] = string(v)
	}
	return toYAML(m)
}

func (f Files) AsSecrets() string {
	if len(f) == 0 {
		return ""
	}
	m := map[string]string{}
	for k, v := range f {
		m[path.Base(k)] = base64.StdEncoding.EncodeToString(v)
	}
	return toYAML(m)
}

func (f Files) Lines(name string) []string {
	if f == nil || f[name] == nil {
		return []string{}
	}
	return strings.Split(string(f[name]), "\n")
}

func globRegexp(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '*' && i+1 < len(pattern) && pattern[i+1] == '*':
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '{':
			b.WriteString("(?:")
		case c == '}':
			b.WriteString(")")
		case c == ',':
			b.WriteString("|")
		case c == '[' || c == ']' || c == '-' || c == '^':
			b.WriteByte(c)
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// ---- Helm's extra template functions ----------------------------------------

func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

func fromYAML(str string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(str), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromYAMLArray(str string) []interface{} {
	a := []interface{}{}
	if err := yaml.Unmarshal([]byte(str), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func fromJSON(str string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(str), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(str string) []interface{} {
	a := []interface{}{}
	if err := json.Unmarshal([]byte(str), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

// ---- Values -----------------------------------------------------------------

func readValues(file string) (map[string]interface{}, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	return m, nil
}

// mergeValues writes src over dst: maps merge recursively, a null deletes.
func mergeValues(dst, src map[string]interface{}) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, sok := v.(map[string]interface{})
		dm, dok := dst[k].(map[string]interface{})
		if sok && dok {
			mergeValues(dm, sm)
			continue
		}
		dst[k] = v
	}
}

// splitTopLevel splits on commas outside {...} lists.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// typedValue converts a --set scalar the way Helm's strvals does.
func typedValue(v string) interface{} {
	switch v {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && (v == "0" || !strings.HasPrefix(v, "0")) {
		return n
	}
	return v
}

var indexRe = regexp.MustCompile(`^(.*)\[(\d+)\]$`)

// parseSet applies "a.b=c,d[0]=e,f={x,y}" to values.
func parseSet(values map[string]interface{}, expr string) error {
	for _, kv := range splitTopLevel(expr) {
		eq := strings.Index(kv, "=")
		if eq <= 0 {
			return fmt.Errorf("--set %q: key=value expected", kv)
		}
		key, raw := kv[:eq], kv[eq+1:]
		var val interface{}
		if strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}") {
			list := []interface{}{}
			if inner := raw[1 : len(raw)-1]; inner != "" {
				for _, item := range splitTopLevel(inner) {
					list = append(list, typedValue(item))
				}
			}
			val = list
		} else {
			val = typedValue(raw)
		}
		parts := strings.Split(key, ".")
		cur := values
		for i, p := range parts {
			last := i == len(parts)-1
			if m := indexRe.FindStringSubmatch(p); m != nil {
				idx, _ := strconv.Atoi(m[2])
				list, _ := cur[m[1]].([]interface{})
				for len(list) <= idx {
					list = append(list, nil)
				}
				if last {
					list[idx] = val
					cur[m[1]] = list
					break
				}
				next, ok := list[idx].(map[string]interface{})
				if !ok {
					next = map[string]interface{}{}
					list[idx] = next
				}
				cur[m[1]] = list
				cur = next
				continue
			}
			if last {
				if val == nil {
					delete(cur, p)
				} else {
					cur[p] = val
				}
				break
			}
			next, ok := cur[p].(map[string]interface{})
			if !ok {
				next = map[string]interface{}{}
				cur[p] = next
			}
			cur = next
		}
	}
	return nil
}

// ---- Chart loading ----------------------------------------------------------

type chart struct {
	dir       string
	meta      Metadata
	values    map[string]interface{}
	templates map[string]string // "<chart>/templates/x.yaml" -> text
	crds      map[string]string // "<chart>/crds/x.yaml" -> text
	files     Files
}

func helmignore(dir string) []string {
	data, err := os.ReadFile(filepath.Join(dir, ".helmignore"))
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, strings.TrimSuffix(line, "/"))
		}
	}
	return out
}

func ignored(patterns []string, rel string) bool {
	for _, p := range patterns {
		for _, candidate := range []string{rel, path.Base(rel), strings.SplitN(rel, "/", 2)[0]} {
			if ok, _ := path.Match(p, candidate); ok {
				return true
			}
		}
	}
	return false
}

func loadChart(dir string) (*chart, error) {
	c := &chart{dir: dir, templates: map[string]string{}, crds: map[string]string{}, files: Files{}}
	data, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(data, &c.meta); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %v", err)
	}
	if c.meta.APIVersion != "v2" {
		return nil, fmt.Errorf("Chart.yaml: apiVersion %q: Helm 3 charts are v2", c.meta.APIVersion)
	}
	if c.meta.Name == "" || c.meta.Version == "" {
		return nil, errors.New("Chart.yaml: name and version are required")
	}
	c.values = map[string]interface{}{}
	if _, err := os.Stat(filepath.Join(dir, "values.yaml")); err == nil {
		if c.values, err = readValues(filepath.Join(dir, "values.yaml")); err != nil {
			return nil, err
		}
	}
	patterns := helmignore(dir)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if ignored(patterns, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		text, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case rel == "Chart.yaml" || rel == "values.yaml":
		case strings.HasPrefix(rel, "templates/"):
			c.templates[c.meta.Name+"/"+rel] = string(text)
		case strings.HasPrefix(rel, "crds/"):
			c.crds[c.meta.Name+"/"+rel] = string(text)
			c.files[rel] = text
		default:
			c.files[rel] = text
		}
		return nil
	})
	return c, err
}

// ---- Rendering --------------------------------------------------------------

type renderer struct {
	root     *template.Template
	base     map[string]interface{} // .Values, .Release, .Chart, .Capabilities, .Files
	basePath string
}

func (r *renderer) funcs() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["fromYamlArray"] = fromYAMLArray
	f["toJson"] = toJSON
	f["fromJson"] = fromJSON
	f["fromJsonArray"] = fromJSONArray
	f["required"] = func(msg string, val interface{}) (interface{}, error) {
		if val == nil {
			return val, errors.New(msg)
		}
		if s, ok := val.(string); ok && s == "" {
			return val, errors.New(msg)
		}
		return val, nil
	}
	f["lookup"] = func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	// include and tpl need the template set: placeholders until it exists.
	f["include"] = func(string, interface{}) (string, error) { return "", errors.New("include: not bound") }
	f["tpl"] = func(string, interface{}) (string, error) { return "", errors.New("tpl: not bound") }
	return f
}

const includeDepth = 1000

func (r *renderer) bind(t *template.Template) {
	depth := map[string]int{}
	t.Funcs(template.FuncMap{
		"include": func(name string, data interface{}) (string, error) {
			if depth[name] > includeDepth {
				return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
			}
			depth[name]++
			defer func() { depth[name]-- }()
			var buf strings.Builder
			if err := t.ExecuteTemplate(&buf, name, data); err != nil {
				return "", err
			}
			return buf.String(), nil
		},
		"tpl": func(text string, data interface{}) (string, error) {
			clone, err := t.Clone()
			if err != nil {
				return "", err
			}
			clone.Option("missingkey=zero")
			r.bind(clone)
			tt, err := clone.New(r.basePath + "/tpl").Parse(text)
			if err != nil {
				return "", fmt.Errorf("cannot parse template %q: %v", text, err)
			}
			var buf strings.Builder
			if err := tt.Execute(&buf, data); err != nil {
				return "", fmt.Errorf("error during tpl function execution for %q: %v", text, err)
			}
			return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
		},
	})
}

func (r *renderer) render(name string) (string, error) {
	data := map[string]interface{}{}
	for k, v := range r.base {
		data[k] = v
	}
	data["Template"] = map[string]interface{}{"Name": name, "BasePath": r.basePath}
	var buf strings.Builder
	if err := r.root.ExecuteTemplate(&buf, name, data); err != nil {
		return "", err
	}
	return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
}

var sepRe = regexp.MustCompile(`(?m)^---[ \t]*$`)

// documents splits a rendered file as Helm's releaseutil.SplitManifests
// does and drops those with nothing but whitespace and comments.
func documents(text string) []string {
	var out []string
	for _, doc := range sepRe.Split(text, -1) {
		meaningful := false
		for _, line := range strings.Split(doc, "\n") {
			l := strings.TrimSpace(line)
			if l != "" && !strings.HasPrefix(l, "#") {
				meaningful = true
				break
			}
		}
		if meaningful {
			out = append(out, strings.Trim(doc, "\n"))
		}
	}
	return out
}

func run() error {
	var valueFiles, sets, apiVersions stringList
	name, namespace, kubeVersion := "release-name", "default", "v1.30.0"
	includeCRDs, notes := false, false
	var chartDir string
	args := os.Args[1:]
	next := func(i *int, flag string) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("%s needs a value", flag)
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		var err error
		var v string
		switch a {
		case "--name":
			name, err = next(&i, a)
		case "--namespace", "-n":
			namespace, err = next(&i, a)
		case "-f", "--values":
			v, err = next(&i, a)
			valueFiles = append(valueFiles, v)
		case "--set":
			v, err = next(&i, a)
			sets = append(sets, v)
		case "--api-versions", "-a":
			v, err = next(&i, a)
			apiVersions = append(apiVersions, v)
		case "--kube-version":
			kubeVersion, err = next(&i, a)
		case "--include-crds":
			includeCRDs = true
		case "--notes":
			notes = true
		default:
			if strings.HasPrefix(a, "-") || chartDir != "" {
				return usageError{fmt.Sprintf("unexpected argument %q", a)}
			}
			chartDir = a
		}
		if err != nil {
			return usageError{err.Error()}
		}
	}
	if chartDir == "" {
		return usageError{"CHART_DIR is required"}
	}
	c, err := loadChart(chartDir)
	if err != nil {
		return err
	}
	values := c.values
	for _, f := range valueFiles {
		m, err := readValues(f)
		if err != nil {
			return err
		}
		mergeValues(values, m)
	}
	for _, s := range sets {
		// --set values take Helm's typed forms; they go through JSON like
		// the rest so numbers are float64 as in values files.
		m := map[string]interface{}{}
		if err := parseSet(m, s); err != nil {
			return usageError{err.Error()}
		}
		js, _ := json.Marshal(m)
		m = map[string]interface{}{}
		_ = json.Unmarshal(js, &m)
		mergeValues(values, m)
	}
	kv := strings.TrimPrefix(kubeVersion, "v")
	parts := strings.SplitN(kv, ".", 3)
	if len(parts) < 2 {
		return usageError{"--kube-version: vMAJOR.MINOR[.PATCH] expected"}
	}
	versions := append(VersionSet{}, defaultAPIVersions...)
	versions = append(versions, apiVersions...)

	r := &renderer{basePath: c.meta.Name + "/templates"}
	r.base = map[string]interface{}{
		"Values":  values,
		"Release": &Release{Name: name, Namespace: namespace, IsInstall: true, Revision: 1, Service: "Helm"},
		"Chart":   &c.meta,
		"Capabilities": &Capabilities{
			KubeVersion: KubeVersion{Version: "v" + kv, Major: parts[0], Minor: parts[1]},
			APIVersions: versions,
			HelmVersion: HelmVersion{Version: "v3.14.0", GoVersion: "go1.19"},
		},
		"Files": c.files,
	}
	r.root = template.New("gotpl").Option("missingkey=zero").Funcs(r.funcs())
	r.bind(r.root)
	names := make([]string, 0, len(c.templates))
	for n := range c.templates {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, err := r.root.New(n).Parse(c.templates[n]); err != nil {
			return err
		}
	}

	var out bytes.Buffer
	if notes {
		n := c.meta.Name + "/templates/NOTES.txt"
		if _, ok := c.templates[n]; !ok {
			return fmt.Errorf("%s does not exist", n)
		}
		text, err := r.render(n)
		if err != nil {
			return err
		}
		out.WriteString(text)
		_, err = os.Stdout.Write(out.Bytes())
		return err
	}
	if includeCRDs {
		crdNames := make([]string, 0, len(c.crds))
		for n := range c.crds {
			crdNames = append(crdNames, n)
		}
		sort.Strings(crdNames)
		for _, n := range crdNames {
			for _, doc := range documents(c.crds[n]) {
				fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", n, doc)
			}
		}
	}
	for _, n := range names {
		base := path.Base(n)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		text, err := r.render(n)
		if err != nil {
			return err
		}
		for _, doc := range documents(text) {
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", n, doc)
		}
	}
	_, err = os.Stdout.Write(out.Bytes())
	return err
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		var u usageError
		if errors.As(err, &u) {
			fmt.Fprintln(os.Stderr, "usage: helm-render [--name R] [--namespace NS] [-f values.yaml]... [--set k=v]... "+
				"[--api-versions g/v]... [--kube-version vX.Y.Z] [--include-crds] [--notes] CHART_DIR")
			os.Exit(2)
		}
		os.Exit(1)
	}
}
