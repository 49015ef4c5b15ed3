// psscheck evaluates every pod template in a multi-document YAML stream against
// the Pod Security Standards with Kubernetes' own evaluator
// (k8s.io/pod-security-admission, the code the API server's PodSecurity
// admission runs). Usage: psscheck [-level restricted] [-version latest] < manifests.yaml
// Prints one line per violation; exit 1 if any, 0 if none, 2 on bad input.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

type typeMeta struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

func main() {
	level := flag.String("level", "restricted", "privileged | baseline | restricted")
	version := flag.String("version", "latest", "Pod Security Standards version, e.g. v1.29 or latest")
	flag.Parse()
	lv, err := api.ParseLevel(*level)
	if err != nil {
		fail(err)
	}
	ver, err := api.ParseVersion(*version)
	if err != nil {
		fail(err)
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		fail(err)
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	checked, violations := 0, 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fail(err)
		}
		var tm typeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil || tm.Kind == "" {
			continue
		}
		meta, spec, err := podOf(tm.Kind, doc)
		if err != nil {
			fail(fmt.Errorf("%s/%s: %w", tm.Kind, tm.Metadata.Name, err))
		}
		if spec == nil {
			continue
		}
		checked++
		for _, r := range evaluator.EvaluatePod(api.LevelVersion{Level: lv, Version: ver}, meta, spec) {
			if !r.Allowed {
				violations++
				fmt.Printf("%s/%s: %s: %s\n", tm.Kind, tm.Metadata.Name, r.ForbiddenReason, r.ForbiddenDetail)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "psscheck: %d pod template(s) checked at %s:%s, %d violation(s)\n", checked, *level, *version, violations)
	if checked == 0 {
		fail(errors.New("no pod template found in the input"))
	}
	if violations > 0 {
		os.Exit(1)
	}
}

func podOf(kind string, doc []byte) (*metav1.ObjectMeta, *corev1.PodSpec, error) {
	switch kind {
	case "Pod":
		var o corev1.Pod
		err := yaml.UnmarshalStrict(doc, &o)
		return &o.ObjectMeta, &o.Spec, err
	case "Job":
		var o batchv1.Job
		err := yaml.UnmarshalStrict(doc, &o)
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	case "Deployment":
		var o appsv1.Deployment
		err := yaml.UnmarshalStrict(doc, &o)
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec, err
	}
	return nil, nil, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "psscheck:", err)
	os.Exit(2)
}
